//! The documentation's links, checked: every relative link in `README.md`,
//! `BENCHMARKS.md` and `docs/*.md` names a file of the repository, and every
//! `#anchor` a heading of its target, so that moving a section between
//! documents cannot leave a dead link. A test over the text, like
//! `layering.rs`. Also the check of the blocks generated from a table in
//! the code ([`generated_block`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Checks that the Markdown table of `file` that starts at the line
/// `header` is `expected`, line for line, up to its first line not starting
/// with `|`. With `UPDATE_README=1` it writes `expected` there instead: the
/// code's table is the source, the document its rendering.
pub(crate) fn generated_block(file: &str, header: &str, expected: &str) {
    let path = root().join(file);
    let text = std::fs::read_to_string(&path).expect("the document is readable");
    let start = text
        .find(&format!("\n{header}\n"))
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("{file}: no table starting {header:?}"));
    let len: usize = text[start..]
        .split_inclusive('\n')
        .take_while(|l| l.starts_with('|'))
        .map(str::len)
        .sum();
    let found = &text[start..start + len];
    if found == expected {
        return;
    }
    if std::env::var_os("UPDATE_README").is_some() {
        let updated = format!("{}{expected}{}", &text[..start], &text[start + len..]);
        std::fs::write(&path, updated).expect("the document is writable");
        return;
    }
    let first = found
        .lines()
        .zip(expected.lines())
        .find(|(f, e)| f != e)
        .map_or_else(
            || {
                format!(
                    "{} rows, expected {}",
                    found.lines().count(),
                    expected.lines().count()
                )
            },
            |(f, e)| format!("found\n{f}\nexpected\n{e}"),
        );
    panic!(
        "{file}: the table at {header:?} is not the code's ({first}); rewrite it with UPDATE_README=1 cargo test --lib"
    );
}

/// The documents whose links are checked.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![root().join("README.md"), root().join("BENCHMARKS.md")];
    for entry in std::fs::read_dir(root().join("docs")).expect("docs/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    docs
}

/// A heading's anchor as GitHub makes it: lowercase, punctuation dropped
/// (but `-` and `_`), spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim_start_matches('#')
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a document's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(anchor(line));
        }
    }
    out
}

/// The targets of a document's inline links `](target)`.
fn links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(t, _)| t.to_string()))
        .collect()
}

#[test]
fn every_relative_link_resolves() {
    let mut dead = Vec::new();
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).expect("a readable document");
        let dir = doc.parent().unwrap_or(Path::new("."));
        for target in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                doc.clone()
            } else {
                dir.join(file)
            };
            if !path.exists() {
                dead.push(format!("{}: {target}: no such file", doc.display()));
                continue;
            }
            if let Some(fragment) = fragment {
                let body = std::fs::read_to_string(&path).unwrap_or_default();
                if !anchors(&body).contains(fragment) {
                    dead.push(format!("{}: {target}: no such heading", doc.display()));
                }
            }
        }
    }
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}
