//! The architecture, checked: the top-level modules import each other only
//! in the directions `lib.rs` documents (so there is no cycle), no two files
//! import each other in a circle (a file and its ancestor modules aside), and
//! `core/` imports no IO type and reads no clock. A test over the source text, so a
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

/// A file's module path under the crate (`src/cli/commands.rs` →
/// `cli::commands`, `src/member/mod.rs` → `member`); `None` for the crate
/// root and the binaries.
fn file_module(path: &Path) -> Option<Vec<String>> {
    let rel = path.strip_prefix(src()).ok()?;
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if parts.is_empty() && matches!(stem, "lib" | "main")
        || parts.first().is_some_and(|p| p == "bin")
    {
        return None;
    }
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    Some(parts)
}

/// Expands one `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn use_paths(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_string()];
    };
    let prefix = tree[..open].trim_end_matches("::").trim();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    // Split the inner list at top-level commas.
    let (mut depth, mut start, mut items) = (0, 0, Vec::new());
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|i| !i.trim().is_empty())
        .flat_map(use_paths)
        .map(|p| match p.strip_prefix("self") {
            Some(rest) if rest.is_empty() || rest.starts_with(" as ") => format!("{prefix}{rest}"),
            _ => format!("{prefix}::{p}"),
        })
        .collect()
}

/// Every path a file's non-test code names that starts with `crate::`,
/// `super::` or `self::`: its `use` trees, paths written inline, and paths
/// through a name a `use` brought in (`use crate::core::sticky;` then
/// `sticky::reassign::f`). Test modules (from the first `#[cfg(test)]`, at
/// the end of a file by this crate's habit) are left out: a test may use
/// what uses it.
fn named_paths(text: &str) -> Vec<String> {
    let text = text.split("#[cfg(test)]").next().unwrap_or(text);
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let word_before = |s: &str| {
        s.chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
    };
    let mut out = Vec::new();
    let mut aliases: Vec<(String, String)> = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        rest = &rest[at + 4..];
        if word_before(before) {
            continue;
        }
        let Some(end) = rest.find(';') else { break };
        for p in use_paths(&rest[..end]) {
            let (path, alias) = match p.split_once(" as ") {
                Some((path, alias)) => (path.trim().to_string(), alias.trim().to_string()),
                None => {
                    let last = p.rsplit("::").next().unwrap_or(&p).to_string();
                    (p.clone(), last)
                }
            };
            if ["crate", "super", "self"]
                .iter()
                .any(|r| path.starts_with(r))
            {
                if alias != "*" && alias != "_" {
                    aliases.push((alias, path.clone()));
                }
                out.push(path);
            }
        }
        rest = &rest[end..];
    }
    let mut starts: Vec<(String, Option<String>)> = ["crate::", "super::", "self::"]
        .iter()
        .map(|s| (s.to_string(), None))
        .collect();
    starts.extend(
        aliases
            .into_iter()
            .map(|(alias, path)| (format!("{alias}::"), Some(path))),
    );
    for (start, through) in starts {
        let mut rest = code.as_str();
        while let Some(at) = rest.find(&start) {
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(tail.len());
            if !word_before(&rest[..at]) {
                let named = tail[..end].trim_end_matches(':');
                out.push(match &through {
                    Some(path) => format!("{path}{}", &named[start.len() - 2..]),
                    None => named.to_string(),
                });
            }
            rest = &tail[start.len()..];
        }
    }
    out
}

/// The file module a path names from `module`, if any: the longest known
/// module path that prefixes it.
fn resolve(path: &str, module: &[String], known: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<String> = match segs.first() {
        Some(&"crate") => {
            segs.remove(0);
            Vec::new()
        }
        Some(&"self") => {
            segs.remove(0);
            module.to_vec()
        }
        Some(&"super") => {
            let mut b = module.to_vec();
            while segs.first() == Some(&"super") {
                segs.remove(0);
                b.pop();
            }
            b
        }
        _ => return None,
    };
    let mut found = None;
    for s in segs {
        base.push(s.to_string());
        if known.contains(&base) {
            found = Some(base.clone());
        }
    }
    found
}

/// Import edges between files, leaving out a file and its own ancestors
/// (a `mod.rs` re-exporting its children, a child using its parent's items).
fn file_edges() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let modules: Vec<(PathBuf, Vec<String>)> = files
        .into_iter()
        .filter_map(|p| file_module(&p).map(|m| (p, m)))
        .collect();
    let known: BTreeSet<Vec<String>> = modules.iter().map(|(_, m)| m.clone()).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (path, module) in &modules {
        let text = std::fs::read_to_string(path).expect("a source file");
        let out = edges.entry(module.clone()).or_default();
        for named in named_paths(&text) {
            let Some(target) = resolve(&named, module, &known) else {
                continue;
            };
            let related = target.starts_with(module) || module.starts_with(&target);
            if !related {
                out.insert(target);
            }
        }
    }
    edges
}

/// The file circles: strongly connected sets of more than one file
/// (Tarjan's algorithm).
fn file_circles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a [String], usize>,
        low: BTreeMap<&'a [String], usize>,
        stack: Vec<&'a [String]>,
        on_stack: BTreeSet<&'a [String]>,
        circles: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a [String]) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                let w = w.as_slice();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let l = self.low[w].min(self.low[v]);
                    self.low.insert(v, l);
                } else if self.on_stack.contains(w) {
                    let l = self.index[w].min(self.low[v]);
                    self.low.insert(v, l);
                }
            }
            if self.low[v] == self.index[v] {
                let mut circle = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    circle.push(w.join("::"));
                    if w == v {
                        break;
                    }
                }
                if circle.len() > 1 {
                    circle.sort();
                    self.circles.push(circle);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        circles: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_slice()) {
            walk.visit(v);
        }
    }
    walk.circles
}

#[test]
fn no_files_import_each_other_in_a_circle() {
    let edges = file_edges();
    assert!(edges.len() > 50, "the source files were found");
    let circles = file_circles(&edges);
    assert!(
        circles.is_empty(),
        "files that import each other in a circle (a file and its ancestors aside):\n{}",
        circles
            .iter()
            .map(|c| c.join(" <-> "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn the_file_scanner_resolves_use_trees_and_finds_circles() {
    assert_eq!(
        use_paths("super::{a::{B, C as D}, d, self}"),
        ["super::a::B", "super::a::C as D", "super::d", "super"]
    );
    assert_eq!(
        named_paths(
            "use crate::core::{ring, sticky};\nfn f() { sticky::reassign::g(); }\n#[cfg(test)]\nuse crate::cli;"
        ),
        [
            "crate::core::ring",
            "crate::core::sticky",
            "crate::core",
            "crate::core::sticky::reassign::g"
        ]
    );
    let known: BTreeSet<Vec<String>> = [vec!["cli".into()], vec!["cli".into(), "controls".into()]]
        .into_iter()
        .collect();
    let from = ["cli".to_string(), "commands".to_string()];
    assert_eq!(
        resolve("super::controls::Control", &from, &known),
        Some(vec!["cli".to_string(), "controls".to_string()])
    );
    assert_eq!(resolve("std::fmt", &from, &known), None);
    let v = |s: &str| s.split("::").map(str::to_string).collect::<Vec<_>>();
    let edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = [
        (v("a::x"), [v("a::y")].into()),
        (v("a::y"), [v("a::x")].into()),
        (v("a::z"), [v("a::x")].into()),
    ]
    .into();
    assert_eq!(
        file_circles(&edges),
        [vec!["a::x".to_string(), "a::y".to_string()]]
    );
}
