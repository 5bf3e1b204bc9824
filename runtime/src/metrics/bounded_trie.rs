//! Bounded-trie metrics (`beam:metrics:bounded_trie:v1`): each bundle
//! reports a trie of string paths (e.g. the lineage of files read), of at
//! most `bound` leaves; past the bound the SDK truncates a subtree into one
//! leaf marked truncated. The job's value is every report combined the way
//! Beam's SDKs combine two tries: merge the trees, take the smaller bound,
//! then truncate the largest subtree until the leaves fit.
use std::collections::BTreeMap;

use prost::Message;

use crate::pb;

/// The bound Beam's SDKs use when a trie names none.
pub const DEFAULT_BOUND: i32 = 100;

#[derive(Clone, Debug, Default, PartialEq)]
struct Node {
    truncated: bool,
    children: BTreeMap<String, Node>,
}

impl Node {
    fn from_proto(p: pb::BoundedTrieNode) -> Node {
        let children = if p.truncated { BTreeMap::new() } else { p.children.into_iter().map(|(k, v)| (k, Node::from_proto(v))).collect() };
        Node { truncated: p.truncated, children }
    }

    fn to_proto(&self) -> pb::BoundedTrieNode {
        pb::BoundedTrieNode { truncated: self.truncated, children: self.children.iter().map(|(k, v)| (k.clone(), v.to_proto())).collect() }
    }

    /// Leaves below (a leaf counts itself).
    fn size(&self) -> usize {
        if self.children.is_empty() {
            1
        } else {
            self.children.values().map(Node::size).sum()
        }
    }

    fn add(&mut self, segments: &[String]) {
        let Some((head, tail)) = segments.split_first().filter(|_| !self.truncated) else { return };
        self.children.entry(head.clone()).or_default().add(tail);
    }

    fn truncate(&mut self) {
        self.truncated = true;
        self.children.clear();
    }

    fn merge(&mut self, other: Node) {
        if self.truncated {
            return;
        }
        if other.truncated {
            return self.truncate();
        }
        for (segment, theirs) in other.children {
            match self.children.get_mut(&segment) {
                Some(ours) => ours.merge(theirs),
                None => {
                    self.children.insert(segment, theirs);
                }
            }
        }
    }

    /// Removes at least one leaf: the largest child is trimmed, or this
    /// node, when each child is one leaf, becomes one truncated leaf.
    fn trim(&mut self) {
        let Some(largest) = self.children.values_mut().max_by_key(|c| c.size()) else { return };
        if largest.size() == 1 {
            self.truncate();
        } else {
            largest.trim();
        }
    }
}

fn is_empty(t: &pb::BoundedTrie) -> bool {
    t.root.is_none() && t.singleton.is_empty()
}

fn bound(t: &pb::BoundedTrie) -> i32 {
    if t.bound > 0 {
        t.bound
    } else {
        DEFAULT_BOUND
    }
}

fn as_node(t: pb::BoundedTrie) -> Node {
    match t.root {
        Some(root) => Node::from_proto(root),
        None => {
            let mut n = Node::default();
            n.add(&t.singleton);
            n
        }
    }
}

/// Two tries as one (see the module's doc).
pub fn combine(a: pb::BoundedTrie, b: pb::BoundedTrie) -> pb::BoundedTrie {
    if is_empty(&a) {
        return b;
    }
    if is_empty(&b) {
        return a;
    }
    let limit = bound(&a).min(bound(&b));
    let mut node = as_node(a);
    node.merge(as_node(b));
    while node.size() > limit.max(1) as usize {
        node.trim();
    }
    pb::BoundedTrie { bound: limit, root: Some(node.to_proto()), singleton: Vec::new() }
}

/// Combines two encoded tries; `None` if either is unreadable.
pub fn combine_encoded(a: &[u8], b: &[u8]) -> Option<Vec<u8>> {
    let (a, b) = (pb::BoundedTrie::decode(a).ok()?, pb::BoundedTrie::decode(b).ok()?);
    Some(combine(a, b).encode_to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every path of the trie, each ending with whether it was truncated
    /// (`"true"`/`"false"`), as Beam's `BoundedTrieResult` lists them.
    fn paths(t: &pb::BoundedTrie) -> Vec<Vec<String>> {
        fn walk(n: &Node, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
            if n.children.is_empty() {
                let mut path = prefix.clone();
                path.push(n.truncated.to_string());
                out.push(path);
                return;
            }
            for (segment, child) in &n.children {
                prefix.push(segment.clone());
                walk(child, prefix, out);
                prefix.pop();
            }
        }
        let mut out = Vec::new();
        if !is_empty(t) {
            walk(&as_node(t.clone()), &mut Vec::new(), &mut out);
        }
        out
    }

    fn single(path: &[&str]) -> pb::BoundedTrie {
        pb::BoundedTrie { bound: 0, root: None, singleton: path.iter().map(|s| s.to_string()).collect() }
    }

    fn strings(paths: &[&[&str]]) -> Vec<Vec<String>> {
        paths.iter().map(|p| p.iter().map(|s| s.to_string()).collect()).collect()
    }

    #[test]
    fn reports_combine_into_every_path_once() {
        let t = [single(&["a", "b"]), single(&["a", "c"]), single(&["a", "b"]), single(&["d"])]
            .into_iter()
            .fold(pb::BoundedTrie::default(), combine);
        assert_eq!(paths(&t), strings(&[&["a", "b", "false"], &["a", "c", "false"], &["d", "false"]]));
        assert_eq!(t.bound, DEFAULT_BOUND);
        // Through the encoding, and with an empty report on either side.
        let again = combine_encoded(&t.encode_to_vec(), &pb::BoundedTrie::default().encode_to_vec()).unwrap();
        assert_eq!(paths(&pb::BoundedTrie::decode(again.as_slice()).unwrap()), paths(&t));
        assert_eq!(combine(pb::BoundedTrie::default(), t.clone()), t);
        assert!(combine_encoded(b"\xff", b"").is_none());
    }

    #[test]
    fn past_the_bound_the_largest_subtree_is_truncated() {
        let mut t = pb::BoundedTrie { bound: 3, ..single(&["x", "1"]) };
        for p in [["x", "2"], ["x", "3"], ["y", "1"]] {
            t = combine(t, single(&p));
        }
        // x has three leaves and y one: four leaves exceed 3, x is trimmed.
        assert_eq!(t.bound, 3);
        assert_eq!(paths(&t), strings(&[&["x", "true"], &["y", "1", "false"]]));
        // A truncated subtree absorbs what is added below it.
        let t = combine(t, single(&["x", "9"]));
        assert_eq!(paths(&t), strings(&[&["x", "true"], &["y", "1", "false"]]));
    }

    #[test]
    fn a_truncated_side_truncates_the_merge() {
        let truncated = pb::BoundedTrie {
            bound: 10,
            root: Some(pb::BoundedTrieNode {
                truncated: false,
                children: [("a".to_string(), pb::BoundedTrieNode { truncated: true, children: Default::default() })].into(),
            }),
            singleton: vec![],
        };
        let t = combine(single(&["a", "b", "c"]), truncated);
        assert_eq!(paths(&t), strings(&[&["a", "true"]]));
    }
}
