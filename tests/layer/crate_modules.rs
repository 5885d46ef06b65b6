//! The crate's modules depend on each other one way, read from the sources: a top-level module
//! imports only the modules below it (`config` → `layer` → `limiter` → `store` → `algorithm`
//! → the bottom: `key`, `quota`, `clock`, `decision`, `error`), and the modules of
//! `src/limiter/` import each other without a cycle.
//!
//! An edge is every `crate::`, `super::` and `self::` path a file mentions outside comments and
//! `#[cfg(test)]` items, resolved through the re-exports of `lib.rs` and each `mod.rs` (so
//! `crate::Quota` is an edge to `quota`, and `crate::limiter::Limiter` one to the file that
//! defines it).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::layer_modules::cycle;

/// The top-level modules from the top down: a module may import those of the levels below
/// its own, and those of its own level so long as they make no cycle.
const LEVELS: &[&[&str]] = &[
    &["config"],
    &["layer"],
    &["limiter"],
    &["store"],
    &["algorithm"],
    &["key", "quota", "clock", "decision", "error"],
];

/// Edges against the levels that stay, each with why: none today.
const KNOWN_EXCEPTIONS: &[(&str, &str, &str)] = &[];

type Module = Vec<String>;

/// A source file: the module it is, and its code without comments and test items.
struct File {
    module: Module,
    code: String,
}

/// Every `.rs` file under `dir` (as `src/` relative paths), with its text.
fn sources(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(root, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            let relative = path.strip_prefix(root).unwrap();
            let relative = relative.to_str().unwrap().replace('\\', "/");
            out.push((relative, text));
        }
    }
}

/// The module a file under `src/` is: `limiter/live/mod.rs` is `limiter::live`, `lib.rs` the
/// root.
fn module_of(path: &str) -> Module {
    let path = path.strip_suffix(".rs").unwrap();
    let mut module: Module = path.split('/').map(str::to_owned).collect();
    if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
        module.pop();
    }
    module
}

/// `text` without comment lines and without the items under `#[cfg(test)]` (a test module, or
/// an import or function for tests only).
fn code_of(text: &str) -> String {
    let text: String = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .map(|line| format!("{line}\n"))
        .collect();
    let mut code = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        code.push_str(&rest[..at]);
        let item = &rest[at..];
        // The item ends at its first `;` when that comes before any `{`, else at the brace
        // that closes its first `{`.
        let (semi, brace) = (item.find(';'), item.find('{'));
        let end = match (semi, brace) {
            (Some(s), Some(b)) if s < b => s + 1,
            (Some(s), None) => s + 1,
            (_, Some(b)) => {
                let mut depth = 0;
                let mut end = item.len();
                for (i, c) in item[b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = b + i + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    code.push_str(rest);
    code
}

/// The paths of the use tree (or plain path) at the start of `s`: `a::{b, c::d}` is `a::b`
/// and `a::c::d`; `self` in a list names the path before it. An alias (`x as y`) is kept as
/// its last segment, `y`, after the path `x`: `[.., "x", "as y"]`.
fn paths(s: &str) -> Vec<Module> {
    fn tree(s: &str, at: &mut usize) -> Vec<Module> {
        let bytes = s.as_bytes();
        let mut prefix = Vec::new();
        loop {
            while *at < bytes.len() && bytes[*at].is_ascii_whitespace() {
                *at += 1;
            }
            if *at < bytes.len() && bytes[*at] == b'{' {
                *at += 1;
                let mut all = Vec::new();
                loop {
                    for mut path in tree(s, at) {
                        let mut full = prefix.clone();
                        if path.first().is_some_and(|p| p == "self") {
                            path.remove(0);
                        }
                        full.extend(path);
                        all.push(full);
                    }
                    // Past an alias, to the next item or the end of the list.
                    let mut depth = 0;
                    while *at < bytes.len() {
                        match bytes[*at] {
                            b'{' => depth += 1,
                            b'}' if depth == 0 => break,
                            b'}' => depth -= 1,
                            b',' if depth == 0 => break,
                            _ => {}
                        }
                        *at += 1;
                    }
                    if *at >= bytes.len() || bytes[*at] == b'}' {
                        *at += 1;
                        return all;
                    }
                    *at += 1;
                }
            }
            let start = *at;
            while *at < bytes.len() && (bytes[*at].is_ascii_alphanumeric() || bytes[*at] == b'_') {
                *at += 1;
            }
            if start == *at {
                break;
            }
            prefix.push(s[start..*at].to_owned());
            if s[*at..].starts_with("::") {
                *at += 2;
            } else {
                // `name as alias`.
                let after = s[*at..].trim_start();
                if let Some(alias) = after.strip_prefix("as ") {
                    let alias: String = alias
                        .trim_start()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    prefix.push(format!("as {alias}"));
                }
                break;
            }
        }
        if prefix.is_empty() {
            Vec::new()
        } else {
            vec![prefix]
        }
    }
    tree(s, &mut 0)
}

/// `path` (as written in `from`) from the crate root, if it is a path within the crate.
fn absolute(from: &[String], path: &[String]) -> Option<Module> {
    let path: Vec<String> = path
        .iter()
        .filter(|p| !p.starts_with("as "))
        .cloned()
        .collect();
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => {
            let mut module = from.to_vec();
            module.extend_from_slice(&path[1..]);
            Some(module)
        }
        "super" => {
            let mut module = from.to_vec();
            let mut rest = &path[..];
            // `super` from `a/b.rs` is `a`; from `a/b/mod.rs` too (the module is `a::b`).
            while rest.first().is_some_and(|p| p == "super") {
                module.pop()?;
                rest = &rest[1..];
            }
            module.extend_from_slice(rest);
            Some(module)
        }
        _ => None,
    }
}

/// The crate read from its sources: its modules, and the names each module re-exports.
struct Crate {
    files: Vec<File>,
    modules: BTreeSet<Module>,
    /// By module, each re-exported name and the absolute path of what it names.
    reexports: BTreeMap<Module, BTreeMap<String, Module>>,
}

impl Crate {
    fn new(sources: &[(String, String)]) -> Self {
        let mut files = Vec::new();
        let mut modules = BTreeSet::new();
        let mut reexports: BTreeMap<Module, BTreeMap<String, Module>> = BTreeMap::new();
        // Modules declared for tests only (`#[cfg(test)] mod tests;`) are not read.
        let mut tests_only = BTreeSet::new();
        for (path, text) in sources {
            for (at, _) in text.match_indices("#[cfg(test)]") {
                let item = text[at + "#[cfg(test)]".len()..].trim_start();
                let Some(name) = item.strip_prefix("mod ") else {
                    continue;
                };
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                let mut module = module_of(path);
                module.push(name);
                tests_only.insert(module);
            }
        }
        for (path, text) in sources {
            let module = module_of(path);
            if tests_only.iter().any(|t| module.starts_with(t)) {
                continue;
            }
            let code = code_of(text);
            for (at, _) in code.match_indices("use ") {
                // A re-export: `pub use`, `pub(crate) use`, ... at the start of its line.
                let line_start = code[..at].rfind('\n').map_or(0, |n| n + 1);
                let visibility = code[line_start..at].trim();
                if !(visibility == "pub" || visibility.starts_with("pub(")) {
                    continue;
                }
                for path in paths(&code[at + 4..]) {
                    let name = match path.last() {
                        Some(last) if last.starts_with("as ") => last[3..].to_owned(),
                        Some(last) => last.clone(),
                        None => continue,
                    };
                    if let Some(target) = absolute(&module, &path) {
                        reexports
                            .entry(module.clone())
                            .or_default()
                            .insert(name, target);
                    }
                }
            }
            // Every prefix of a file's module is a module (`a/b/c.rs` makes `a` and `a::b`).
            for len in 1..=module.len() {
                modules.insert(module[..len].to_vec());
            }
            files.push(File { module, code });
        }
        Self {
            files,
            modules,
            reexports,
        }
    }

    /// The module that defines what the absolute `path` names.
    fn resolve(&self, path: &[String], depth: usize) -> Module {
        let mut at: Module = Vec::new();
        for (i, segment) in path.iter().enumerate() {
            let mut next = at.clone();
            next.push(segment.clone());
            if self.modules.contains(&next) {
                at = next;
                continue;
            }
            let target = self.reexports.get(&at).and_then(|names| names.get(segment));
            return match target {
                Some(target) if depth < 8 => {
                    let mut full = target.clone();
                    full.extend_from_slice(&path[i + 1..]);
                    self.resolve(&full, depth + 1)
                }
                _ => at,
            };
        }
        at
    }

    /// Each file's module and the modules it imports, outside itself.
    fn edges(&self) -> Vec<(Module, Module)> {
        let mut edges = Vec::new();
        for file in &self.files {
            let code = &file.code;
            for prefix in ["crate::", "super::", "self::"] {
                for (at, _) in code.match_indices(prefix) {
                    let before = code[..at].chars().next_back();
                    if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                        continue;
                    }
                    for path in paths(&code[at..]) {
                        let Some(absolute) = absolute(&file.module, &path) else {
                            continue;
                        };
                        let target = self.resolve(&absolute, 0);
                        if !target.is_empty() && target != file.module {
                            edges.push((file.module.clone(), target));
                        }
                    }
                }
            }
        }
        edges
    }
}

fn read_crate() -> Crate {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &root, &mut files);
    Crate::new(&files)
}

/// The level of the top-level module `name` in [`LEVELS`].
fn level(name: &str) -> Option<usize> {
    LEVELS.iter().position(|level| level.contains(&name))
}

/// The edges between top-level modules, as `(from, to)`, from every file but `lib.rs` (which
/// re-exports) and the guide (prose).
fn top_level(krate: &Crate) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for (from, to) in krate.edges() {
        let (Some(a), Some(b)) = (from.first(), to.first()) else {
            continue;
        };
        if a != b {
            edges
                .entry((a.clone(), b.clone()))
                .or_default()
                .insert(format!("{} -> {}", from.join("::"), to.join("::")));
        }
    }
    edges
}

/// The imports that go against [`LEVELS`], or join a cycle within a level, with the files
/// that make them.
fn violations(krate: &Crate) -> Vec<String> {
    let edges = top_level(krate);
    let mut found = Vec::new();
    for ((a, b), why) in &edges {
        if KNOWN_EXCEPTIONS.iter().any(|(x, y, _)| x == a && y == b) {
            continue;
        }
        match (level(a), level(b)) {
            (Some(la), Some(lb)) if la < lb => {}
            (Some(la), Some(lb)) if la == lb => {
                if edges.contains_key(&(b.clone(), a.clone())) {
                    found.push(format!("{a} and {b} import each other: {why:?}"));
                }
            }
            (Some(_), Some(_)) => found.push(format!("{a} imports {b}, above it: {why:?}")),
            _ if a == "guide" => {}
            _ => found.push(format!(
                "{a} -> {b}: a module missing from LEVELS (place it there): {why:?}"
            )),
        }
    }
    found
}

/// A cycle among the children of `parent` (by their first segment under it), if there is one.
fn child_cycle(
    krate: &Crate,
    parent: &str,
) -> (BTreeMap<String, BTreeSet<String>>, Option<Vec<String>>) {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in &krate.modules {
        if module.len() >= 2 && module[0] == parent {
            graph.entry(module[1].clone()).or_default();
        }
    }
    for (from, to) in krate.edges() {
        if from.len() >= 2
            && to.len() >= 2
            && from[0] == parent
            && to[0] == parent
            && from[1] != to[1]
        {
            graph.get_mut(&from[1]).unwrap().insert(to[1].clone());
        }
    }
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        if let Some(found) = cycle(&graph, module, &mut Vec::new(), &mut done) {
            return (graph.clone(), Some(found));
        }
    }
    (graph, None)
}

#[test]
fn top_level_modules_import_downwards() {
    let krate = read_crate();
    let edges = top_level(&krate);
    // The reader sees known edges, through paths, lists and re-exports.
    for (a, b) in [
        ("layer", "limiter"),
        ("limiter", "store"),
        ("store", "algorithm"),
        ("config", "layer"),
        ("algorithm", "quota"),
    ] {
        assert!(
            edges.contains_key(&(a.to_owned(), b.to_owned())),
            "{a} -> {b} not seen: {:?}",
            edges.keys()
        );
    }
    let found = violations(&krate);
    assert!(
        found.is_empty(),
        "imports against the levels:\n{}",
        found.join("\n")
    );
}

#[test]
fn limiter_modules_import_one_way() {
    let krate = read_crate();
    let (graph, cycle) = child_cycle(&krate, "limiter");
    assert!(graph.len() >= 8, "read too few modules: {graph:?}");
    // The reader sees known edges.
    assert!(graph["ban"].contains("object"), "{graph:?}");
    assert!(graph["per_key"].contains("bind"), "{graph:?}");
    assert!(graph["per_key"].contains("live"), "{graph:?}");
    assert!(graph["plan_change"].contains("per_key"), "{graph:?}");
    if let Some(cycle) = cycle {
        panic!("src/limiter/ modules import each other in a cycle: {cycle:?}\n{graph:?}");
    }
}

/// The check catches what it is for: the store importing the layer, in any spelling.
#[test]
fn an_import_against_the_levels_is_caught() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &root, &mut files);
    for import in [
        "use crate::layer::Handle;",
        "use crate::{layer::RateLimitLayer, Quota};",
        "pub(crate) fn f() -> Option<crate::RateLimitLayer> { None }",
        "use super::super::super::limiter::Limiter;",
    ] {
        let mut with = files.clone();
        with.push(("store/memory/oops.rs".to_owned(), import.to_owned()));
        let found = violations(&Crate::new(&with));
        assert!(
            found.iter().any(|v| v.starts_with("store imports")),
            "{import} in src/store/ not caught: {found:?}"
        );
    }
    // An import for tests only is not an edge.
    let mut with = files.clone();
    with.push((
        "store/memory/oops.rs".to_owned(),
        "#[cfg(test)]\nmod tests {\n    use crate::layer::Handle;\n}\n".to_owned(),
    ));
    assert!(violations(&Crate::new(&with)).is_empty());
}

/// The most lines of code a file of `src/` holds: comments, blank lines and test items not
/// counted. A file past it is split along a seam of its own (as `src/store/redis/table/`).
const MOST_LINES_OF_CODE: usize = 300;

#[test]
fn no_file_holds_more_than_300_lines_of_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &root, &mut files);
    assert!(files.len() > 100, "{} files read", files.len());
    let over: Vec<String> = files
        .iter()
        // A `tests.rs` is a test module of its own (`#[cfg(test)] mod tests;`).
        .filter(|(path, _)| !path.ends_with("/tests.rs"))
        .filter_map(|(path, text)| {
            let lines = code_of(text)
                .lines()
                .filter(|line| !line.trim().is_empty())
                .count();
            (lines > MOST_LINES_OF_CODE).then(|| format!("{path}: {lines}"))
        })
        .collect();
    assert!(
        over.is_empty(),
        "files over {MOST_LINES_OF_CODE} lines of code: {over:?}"
    );
}

/// Every item of `src/` that is public and documented: a top-level `pub` declaration not
/// marked `#[doc(hidden)]` (`unreachable_pub` keeps every other top-level `pub`
/// reachable from outside), as `file: name`. Methods are not listed.
fn public_items(root: &Path) -> BTreeSet<String> {
    let mut files = Vec::new();
    sources(root, root, &mut files);
    let mut items = BTreeSet::new();
    for (path, text) in files {
        let path = path.trim_start_matches("src/");
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i];
            i += 1;
            let Some(rest) = line.strip_prefix("pub ") else {
                continue;
            };
            // The attributes and doc comments right above the item.
            let hidden = lines[..i - 1]
                .iter()
                .rev()
                .take_while(|l| l.starts_with("#[") || l.starts_with("///"))
                .any(|l| l.starts_with("#[doc(hidden)]"));
            if hidden {
                continue;
            }
            // A re-export names an item declared, and listed, where it is declared.
            if rest.starts_with("use ") {
                continue;
            }
            let name: String = rest
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ' '))
                .next()
                .unwrap_or_default()
                .trim()
                .to_owned();
            items.insert(format!("{path}: {name}"));
        }
    }
    items
}

/// The public surface is what a user can use end to end; the plumbing between limiters,
/// algorithms and stores (cells, tables, futures, states, the stores' side of each algorithm)
/// is the crate's own, crate-private or `#[doc(hidden)]`. A new public item is a decision:
/// add it here.
#[test]
fn the_public_surface_is_pinned() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = public_items(&root);
    let expected: BTreeSet<String> = PUBLIC_ITEMS.iter().map(|s| s.to_string()).collect();
    let added: Vec<_> = found.difference(&expected).collect();
    let gone: Vec<_> = expected.difference(&found).collect();
    assert!(
        added.is_empty() && gone.is_empty(),
        "public items added: {added:#?}\npublic items gone: {gone:#?}"
    );
}

/// The public, documented items of `src/` ([`public_items`]).
const PUBLIC_ITEMS: &[&str] = &[
    "algorithm/fixed_window.rs: struct FixedWindow",
    "algorithm/gcra.rs: struct Gcra",
    "algorithm/hybrid.rs: struct Hybrid",
    "algorithm/leaky_bucket.rs: struct LeakyBucket",
    "algorithm/mod.rs: trait Algorithm",
    "algorithm/mod.rs: trait Aligned",
    "algorithm/mod.rs: trait Shaping",
    "algorithm/mod.rs: trait SubWindows",
    "algorithm/sliding_log.rs: struct SlidingLog",
    "algorithm/sliding_window.rs: struct SlidingWindow",
    "algorithm/tiered.rs: struct Tiered",
    "algorithm/tiered.rs: trait Quotas",
    "algorithm/token_bucket.rs: struct TokenBucket",
    "clock.rs: struct ManualClock",
    "clock.rs: struct OsClock",
    "clock.rs: struct Sleep",
    "clock.rs: struct SystemClock",
    "clock.rs: trait Clock",
    "config/error.rs: struct ConfigError",
    "config/key.rs: enum KeyConfig",
    "config/key.rs: enum KeyPart",
    "config/key.rs: struct ClientIpConfig",
    "config/limit/mod.rs: struct LimitConfig",
    "config/limits.rs: struct Limits",
    "config/store.rs: struct ConfiguredStore",
    "config/store.rs: struct StoreConfig",
    "decision.rs: struct Decision",
    "decision.rs: struct Decisions",
    "error.rs: enum ErrorKind",
    "error.rs: struct Error",
    "guide/mod.rs: mod algorithms",
    "guide/mod.rs: mod config",
    "guide/mod.rs: mod costs",
    "guide/mod.rs: mod keys",
    "guide/mod.rs: mod operating",
    "guide/mod.rs: mod recipes",
    "guide/mod.rs: mod redis",
    "guide/mod.rs: mod responses",
    "guide/mod.rs: mod testing",
    "key/allow.rs: struct Allow",
    "key/allow.rs: struct IpList",
    "key/cidr.rs: struct IpNet",
    "key/cidr.rs: struct ParseIpNetError",
    "key/client_ip.rs: struct ClientIp",
    "key/combine.rs: struct Or",
    "key/combine.rs: struct Skip",
    "key/error.rs: struct KeyError",
    "key/forwarded.rs: enum ForwardedHeader",
    "key/head.rs: fn from_fn",
    "key/head.rs: struct FromFn",
    "key/head.rs: struct RequestHead",
    "key/header.rs: struct BearerToken",
    "key/header.rs: struct Header",
    "key/mod.rs: struct Global",
    "key/mod.rs: trait KeyExtractor",
    "key/peer.rs: const PeerIp",
    "key/peer.rs: struct PeerAddr",
    "key/peer.rs: struct PeerIp",
    "key/route.rs: struct Method",
    "key/route.rs: struct Route",
    "key/value/mod.rs: struct Key",
    "layer/answer.rs: trait AnswerBody",
    "layer/answer.rs: type BoxError",
    "layer/handle.rs: struct Handle",
    "layer/headers.rs: enum HeaderPlacement",
    "layer/headers.rs: enum HeaderStyle",
    "layer/in_flight/layer.rs: struct InFlightLayer",
    "layer/layer.rs: struct RateLimitLayer",
    "layer/response.rs: fn problem_details",
    "layer/service.rs: struct RateLimit",
    "layer/settle.rs: struct Usage",
    "layer/upgrade.rs: struct InFlightSlot",
    "lib.rs: mod algorithm",
    "lib.rs: mod clock",
    "lib.rs: mod config",
    "lib.rs: mod guide",
    "lib.rs: mod key",
    "lib.rs: mod layer",
    "lib.rs: mod store",
    "limiter/ban.rs: struct Ban",
    "limiter/plan.rs: trait Plan",
    "limiter/bind.rs: trait LayerStore",
    "limiter/typed.rs: struct RateLimiter",
    "quota.rs: struct ParseQuotaError",
    "quota.rs: struct Quota",
    "store/in_flight.rs: trait SlotStore",
    "store/memory/mod.rs: struct MemoryStore",
    "store/mod.rs: mod redis",
    "store/mod.rs: trait Store",
    "store/redis/leases/mod.rs: struct Leases",
    "store/redis/mod.rs: struct RedisStore",
    "store/redis/on_failure.rs: enum OnFailure",
];
