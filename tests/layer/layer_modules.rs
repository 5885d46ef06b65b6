//! The modules of `src/layer/` depend on each other one way: no module imports another that
//! (directly or through others) imports it back. Read from the sources: every `super::name`
//! a file mentions is an edge, and the graph must have no cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The `super::<module>` paths each file of `src/layer/` mentions, by module.
fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/layer");
    let mut modules = BTreeMap::new();
    let mut files = Vec::new();
    sources(&dir, &mut files);
    for (path, text) in &files {
        // A file of a folder (`layer/options.rs`, `in_flight/mod.rs`) belongs to the folder's
        // module; its `super::super::name` paths are seen as `name`.
        let inner = Path::new(path).strip_prefix(&dir).unwrap();
        let first = inner.components().next().unwrap();
        let name = Path::new(first.as_os_str())
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        if name == "mod" {
            continue;
        }
        // Unit tests (`mod tests { use super::*; }`) import their own module.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let uses: &mut BTreeSet<String> = modules.entry(name).or_default();
        for (at, _) in code.match_indices("super::") {
            let rest = &code[at + "super::".len()..];
            let module: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // `super::{a, b}` lists several.
            if module.is_empty() && rest.starts_with('{') {
                let list = &rest[1..rest.find('}').unwrap()];
                for item in list.split(',') {
                    let item = item.trim().split("::").next().unwrap().trim();
                    if !item.is_empty() {
                        uses.insert(item.to_owned());
                    }
                }
            } else if !module.is_empty() {
                uses.insert(module);
            }
        }
    }
    // Keep edges to sibling modules only (`super::RateLimit` names a re-export of mod.rs).
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    for uses in modules.values_mut() {
        uses.retain(|u| names.contains(u));
    }
    modules
}

/// A cycle through `from`, if there is one, as the modules on it.
pub(super) fn cycle(
    graph: &BTreeMap<String, BTreeSet<String>>,
    at: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(start) = path.iter().position(|m| m == at) {
        return Some(path[start..].to_vec());
    }
    if done.contains(at) {
        return None;
    }
    path.push(at.to_owned());
    for next in &graph[at] {
        if let Some(found) = cycle(graph, next, path, done) {
            return Some(found);
        }
    }
    path.pop();
    done.insert(at.to_owned());
    None
}

#[test]
fn layer_modules_import_one_way() {
    let graph = edges();
    assert!(graph.len() >= 10, "read too few modules: {graph:?}");
    // The parser sees known edges.
    assert!(graph["service"].contains("future"), "{graph:?}");
    assert!(graph["response"].contains("headers"), "{graph:?}");
    // Files of a folder count for its module.
    assert!(graph["layer"].contains("headers"), "{graph:?}");
    let mut done = BTreeSet::new();
    for module in graph.keys() {
        if let Some(found) = cycle(&graph, module, &mut Vec::new(), &mut done) {
            panic!("src/layer/ modules import each other in a cycle: {found:?}");
        }
    }
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((path.display().to_string(), text));
        }
    }
}

/// Tables that clients fill with keys they choose (states, blocks, the Redis deny cache) hash
/// them with the store's keyed hasher (`store/memory/hasher.rs`: SipHash with random keys, the
/// fast hash for IPv4 addresses only). foldhash is "minimally DoS-resistant": it is used
/// nowhere else but for the layer's plans, a table of at most 256 entries keyed by the
/// server's own quotas.
#[test]
fn client_keys_are_hashed_with_the_keyed_hasher() {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let allowed = ["store/memory/hasher.rs", "limiter/per_key.rs"];
    let offenders: Vec<&str> = files
        .iter()
        .filter(|(path, text)| {
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            code.contains("foldhash") && !allowed.iter().any(|a| path.ends_with(a))
        })
        .map(|(path, _)| path.as_str())
        .collect();
    assert!(
        offenders.is_empty(),
        "foldhash hashes client keys in {offenders:?}: use the store's KeyHasher"
    );
}
