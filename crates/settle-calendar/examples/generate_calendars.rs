//! Regenerates the shipped calendar data files from the holiday rules:
//!
//! ```text
//! cargo run -p settle-calendar --example generate_calendars
//! ```
//!
//! Writes `calendars/target2.txt` and `calendars/us-federal-reserve.txt` in the crate
//! directory. The files are committed as data; `tests/shipped_data.rs` checks that they
//! still equal what the rules produce.

#[path = "../tests/support/holiday_rules.rs"]
mod holiday_rules;

use std::path::Path;

fn main() -> std::io::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("calendars");
    std::fs::create_dir_all(&dir)?;
    for (file, text) in [
        ("target2.txt", holiday_rules::target2_file()),
        (
            "us-federal-reserve.txt",
            holiday_rules::us_federal_reserve_file(),
        ),
    ] {
        let path = dir.join(file);
        std::fs::write(&path, text)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
