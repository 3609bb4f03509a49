//! Result tables: a title, the method in a sentence or two, and rows, printed
//! as Markdown so a run's output can go into BENCHMARKS.md as it is.

use std::fmt;

/// One scenario's figures.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// What was measured, and under which server configuration.
    pub title: String,
    /// How it was measured.
    pub method: String,
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows of cells, as many as `headers`.
    pub rows: Vec<Vec<String>>,
    /// Remarks printed under the table.
    pub notes: Vec<String>,
}

impl Table {
    /// An empty table with these headers.
    pub fn new(title: impl Into<String>, method: impl Into<String>, headers: &[&str]) -> Table {
        Table {
            title: title.into(),
            method: method.into(),
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Adds a remark.
    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cols = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(cols) {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        writeln!(f, "### {}", self.title)?;
        writeln!(f)?;
        writeln!(f, "Method: {}", self.method)?;
        writeln!(f)?;
        let line = |f: &mut fmt::Formatter<'_>, cells: &[String]| -> fmt::Result {
            write!(f, "|")?;
            for (i, w) in widths.iter().enumerate() {
                let cell = cells.get(i).map_or("", String::as_str);
                write!(f, " {cell:<w$} |")?;
            }
            writeln!(f)
        };
        line(f, &self.headers)?;
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        line(f, &rule)?;
        for row in &self.rows {
            line(f, row)?;
        }
        for note in &self.notes {
            writeln!(f)?;
            writeln!(f, "{note}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_aligned_markdown() {
        let mut t = Table::new("T", "m", &["a", "long header"]);
        t.row(vec!["wide cell".into(), "x".into()]);
        let s = t.to_string();
        assert!(s.contains("| a         | long header |"), "{s}");
        assert!(s.contains("| wide cell | x           |"), "{s}");
        assert!(s.contains("| --------- | ----------- |"), "{s}");
    }
}
