//! Small text helpers the agent's modules share.

/// `text` cut to at most `max` bytes on a character boundary, with a note of
/// the full size when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes in all]", &text[..end], text.len())
}
