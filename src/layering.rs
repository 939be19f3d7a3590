//! The architecture, checked: the top-level modules import each other only
//! in the directions `lib.rs` documents (so there is no cycle), and `core/`
//! imports no IO type and reads no clock. A test over the source text, so a
//! new `use` that breaks the layering fails here with its file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which top-level modules each one may import (`lib.rs` items such as
/// `unix_ms` and `proto` are open to all but `core`).
const ALLOWED: &[(&str, &[&str])] = &[
    ("core", &[]),
    ("error", &[]),
    ("edge", &["core", "error"]),
    ("report", &["core"]),
    ("config", &["core", "edge", "error"]),
    ("ops", &["core", "edge", "error", "report"]),
    ("coordinator", &["config", "core", "edge", "error", "ops"]),
    ("cli", &["config", "core", "edge", "ops", "report"]),
    ("member", &["core", "edge", "error"]),
];

/// What `core/` never names: IO, runtimes, and the clocks (time comes in as
/// values; `timing::test_t0` is the tests' one exception).
const CORE_FORBIDDEN: &[&str] = &[
    "tokio",
    "redis::",
    "tonic",
    "axum",
    "hyper",
    "std::fs",
    "std::net::Tcp",
    "std::net::Udp",
    "std::thread",
    "SystemTime::now",
    "Instant::now",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level module a file of `src/` belongs to (`None`: the crate
/// root, `main.rs`, the binaries and this test).
fn module_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src()).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    ALLOWED
        .iter()
        .any(|(m, _)| *m == name)
        .then(|| name.to_string())
}

/// The top-level modules named by `crate::NAME` (and `crate::{A, B::..}`)
/// in `text`, with the line of each.
fn imports(text: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or("");
                inner
                    .split(',')
                    .filter_map(|p| p.trim().split("::").next())
                    .collect()
            } else {
                vec![
                    rest.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .next()
                        .unwrap_or(""),
                ]
            };
            found.extend(
                names
                    .into_iter()
                    .filter(|n| !n.is_empty())
                    .map(|n| (n.to_string(), i + 1)),
            );
        }
    }
    found
}

#[test]
fn modules_import_only_downwards() {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(m, deps)| (*m, deps.iter().copied().collect()))
        .collect();
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut wrong = Vec::new();
    for path in &files {
        let Some(module) = module_of(path) else {
            continue;
        };
        let text = std::fs::read_to_string(path).expect("a source file");
        for (name, line) in imports(&text) {
            let top_level = allowed.contains_key(name.as_str());
            if top_level && name != module && !allowed[module.as_str()].contains(name.as_str()) {
                wrong.push(format!(
                    "{}:{line}: {module} imports {name}",
                    path.display()
                ));
            }
            if module == "core" && !top_level && name != "core" {
                wrong.push(format!(
                    "{}:{line}: core imports crate::{name}",
                    path.display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layering:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_allowed_imports_have_no_cycle() {
    let graph: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    // Depth-first, with the path so far: a module met again on it is a cycle.
    fn visit<'a>(m: &'a str, graph: &BTreeMap<&'a str, &'a [&'a str]>, path: &mut Vec<&'a str>) {
        assert!(!path.contains(&m), "cycle: {} -> {m}", path.join(" -> "));
        path.push(m);
        for d in graph[m].iter() {
            visit(d, graph, path);
        }
        path.pop();
    }
    for m in graph.keys() {
        visit(m, &graph, &mut Vec::new());
    }
}

#[test]
fn core_names_no_io_and_reads_no_clock() {
    let mut files = Vec::new();
    rust_files(&src().join("core"), &mut files);
    assert!(files.len() > 10, "core's files were found");
    let mut wrong = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).expect("a source file");
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for f in CORE_FORBIDDEN {
                let exempt = path.ends_with("core/timing.rs") && *f == "Instant::now";
                if code.contains(f) && !exempt {
                    wrong.push(format!("{}:{}: {f}", path.display(), i + 1));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "core names IO or a clock:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_scanner_sees_grouped_and_plain_imports() {
    let got = imports("use crate::{edge::x, ops};\nlet a = crate::core::f(); // crate::cli\n");
    assert_eq!(
        got,
        vec![("edge".into(), 1), ("ops".into(), 1), ("core".into(), 2)]
    );
}
