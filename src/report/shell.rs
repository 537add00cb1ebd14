//! Commands printed for the user to paste into the shell they ran `settle` from: the program
//! as that shell finds it, and every word quoted for a POSIX shell.
//!
//! The program is `settle` only when the first `settle` on `PATH` is this very binary (after
//! the README's `cargo install --path . --locked`); otherwise it is this binary's absolute
//! path (e.g. `…/target/debug/settle` under `cargo run`), which works from any directory.
//! `tests/it/first_minutes.rs` pastes the demo's printed lines into `sh` as they are.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// The name the README's install step puts on `PATH`.
pub const PROGRAM_NAME: &str = "settle";

/// How the user's shell runs this binary: `settle` when `PATH` finds this binary under that
/// name, else its absolute path, quoted.
pub fn program() -> String {
    let exe = std::env::current_exe().and_then(|p| p.canonicalize());
    match exe {
        Ok(exe) => program_for(&exe, std::env::var_os("PATH").as_deref()),
        // No way to name this binary: the installed name is the best guess.
        Err(_) => PROGRAM_NAME.to_owned(),
    }
}

/// [`program`] for the binary `exe` (canonical) and the search path `path_var`.
pub(crate) fn program_for(exe: &Path, path_var: Option<&OsStr>) -> String {
    let found = path_var.and_then(|p| first_on_path(PROGRAM_NAME, p));
    match found {
        Some(found) if found == exe => PROGRAM_NAME.to_owned(),
        _ => quote(&exe.to_string_lossy()),
    }
}

/// The file the shell runs for `name`: the first executable `DIR/name` of `path_var`,
/// canonical (a symlink resolved), as `execvp` searches.
fn first_on_path(name: &str, path_var: &OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path_var)
        // An empty entry means the current directory, as for the shell.
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                dir
            }
        })
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .and_then(|candidate| candidate.canonicalize().ok())
}

/// One word for a POSIX shell: as it is when it holds only characters no shell treats
/// specially, else in single quotes (a `'` inside written `'\''`).
pub(crate) fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(feature = "local-chain")]
/// A command line: `program` (already quoted, see [`program`]) and `args`, each quoted.
pub(crate) fn command_line(program: &str, args: &[&str]) -> String {
    let mut line = program.to_owned();
    for arg in args {
        line.push(' ');
        line.push_str(&quote(arg));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_only_when_a_shell_would_change_them() {
        assert_eq!(
            quote("sqlite:///tmp/settle-demo/settle.db"),
            "sqlite:///tmp/settle-demo/settle.db"
        );
        assert_eq!(quote("/home/a b/settle"), "'/home/a b/settle'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("$HOME"), "'$HOME'");
        assert_eq!(quote(""), "''");
        assert_eq!(
            command_line("settle", &["--database", "sqlite:///x y/s.db", "serve"]),
            "settle --database 'sqlite:///x y/s.db' serve"
        );
    }

    #[test]
    fn the_program_is_settle_only_when_path_finds_this_binary() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("build/settle");
        std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        std::fs::set_permissions(&exe, mode).unwrap();
        let exe = exe.canonicalize().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        symlink(&exe, bin.join("settle")).unwrap();
        let other = dir.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("settle"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            other.join("settle"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let path = |dirs: &[&Path]| std::env::join_paths(dirs).unwrap();

        // PATH finds this binary (through a symlink): `settle`.
        assert_eq!(program_for(&exe, Some(&path(&[&bin]))), "settle");
        // PATH finds another `settle` first, or none: this binary's own path.
        let own = exe.to_string_lossy().into_owned();
        assert_eq!(program_for(&exe, Some(&path(&[&other, &bin]))), quote(&own));
        assert_eq!(program_for(&exe, Some(&path(&[&other]))), quote(&own));
        assert_eq!(program_for(&exe, None), quote(&own));
    }
}
