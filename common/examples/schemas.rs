//! Writes the JSON Schemas of the wire types into `docs/protocol/`
//! (`cargo run -p swarm-common --example schemas`), replacing what is there;
//! `common/tests/schemas.rs` fails while the checked-in files differ.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/protocol");
    std::fs::create_dir_all(&dir)?;
    // Files of types that are gone go too: the directory is generated whole.
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json") {
            std::fs::remove_file(&path)?;
        }
    }
    for (name, schema) in swarm_common::schema::all() {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, swarm_common::schema::file_text(&schema))?;
        println!("wrote docs/protocol/{name}.json");
    }
    Ok(())
}
