//! The topology as a picture (SVG), drawn by the runner itself for the
//! status page and `beam-kafka describe --format svg`: topics and
//! sub-topologies (with their stage's transforms) in layers from left to
//! right, in the order data flows, joined by arrows; side inputs dashed.
use std::fmt::Write as _;

use super::{name_of, InputKind, TopicKind, TopologyPlan};
use crate::plan::graph::PipelineGraph;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Topic,
    SubTopology,
    Sink,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub kind: NodeKind,
    /// The first line is the title; the rest are listed under it.
    pub lines: Vec<String>,
    /// An id the page can find the node by (`topic-<name>`, `sub-<id>`).
    pub id: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: usize,
    pub to: usize,
    pub label: String,
    pub dashed: bool,
}

/// Nodes and edges before layout.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Picture {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

const CHAR_W: f64 = 7.0;
const LINE_H: f64 = 16.0;
const PAD: f64 = 8.0;
const COL_GAP: f64 = 110.0;
const ROW_GAP: f64 = 24.0;
const MAX_CHARS: usize = 48;
/// Edge labels fit between two columns (10 px text); the whole label is
/// the edge's tooltip.
const LABEL_CHARS: usize = 18;

impl Picture {
    pub fn of(plan: &TopologyPlan, graph: &PipelineGraph) -> Picture {
        let mut p = Picture::default();
        let kind_text = |k: TopicKind| match k {
            TopicKind::Impulse => "impulse",
            TopicKind::Empty => "empty (Flatten of nothing)",
            TopicKind::Shuffle => "shuffle",
            TopicKind::Source => "source (user topic)",
            TopicKind::Edge => "edge",
            TopicKind::Side => "side input",
            TopicKind::TestStream => "TestStream",
        };
        for t in &plan.topics {
            // A user topic's partitions are learnt from the broker at start.
            let partitions = if t.partitions == 0 { String::new() } else { format!(" · {} partition(s)", t.partitions) };
            p.nodes.push(Node {
                kind: NodeKind::Topic,
                lines: vec![t.name.clone(), format!("{}{partitions}", kind_text(t.kind))],
                id: format!("topic-{}", t.name),
            });
        }
        for s in &plan.sub_topologies {
            let me = p.nodes.len();
            let mut lines = vec![format!("sub-topology {} · {} task(s)", s.id, s.partitions)];
            lines.extend(s.stage.transforms.iter().map(|t| name_of(graph, t)));
            p.nodes.push(Node { kind: NodeKind::SubTopology, lines, id: format!("sub-{}", s.id) });
            for i in &s.inputs {
                let label = match &i.kind {
                    InputKind::Direct => String::new(),
                    InputKind::GroupByKey { transform } | InputKind::Source { transform } => name_of(graph, transform),
                };
                p.edges.push(Edge { from: i.topic, to: me, label, dashed: false });
            }
            for side in &s.side_inputs {
                p.edges.push(Edge { from: side.topic, to: me, label: format!("side input {}", side.local_name), dashed: true });
            }
            for o in &s.outputs {
                p.edges.push(Edge { from: me, to: o.topic, label: String::new(), dashed: false });
            }
            for k in &s.sinks {
                let sink = p.nodes.len();
                p.nodes.push(Node {
                    kind: NodeKind::Sink,
                    lines: vec![name_of(graph, &k.transform), "WriteToKafka".into()],
                    id: format!("sink-{}", k.transform),
                });
                p.edges.push(Edge { from: me, to: sink, label: String::new(), dashed: false });
            }
        }
        p
    }

    /// Each node's layer: one more than its deepest predecessor's (edges
    /// that would go back, in a malformed graph, are ignored).
    pub fn layers(&self) -> Vec<usize> {
        let mut layer = vec![0usize; self.nodes.len()];
        for _ in 0..self.nodes.len() {
            let mut moved = false;
            for e in &self.edges {
                if layer[e.to] < layer[e.from] + 1 && layer[e.from] + 1 < self.nodes.len() {
                    layer[e.to] = layer[e.from] + 1;
                    moved = true;
                }
            }
            if !moved {
                break;
            }
        }
        layer
    }

    pub fn to_svg(&self) -> String {
        let layer = self.layers();
        let size = |n: &Node| {
            let chars = n.lines.iter().map(|l| l.chars().count().min(MAX_CHARS)).max().unwrap_or(0);
            (chars as f64 * CHAR_W + 2.0 * PAD, n.lines.len() as f64 * LINE_H + 2.0 * PAD)
        };
        let layers = layer.iter().max().map_or(0, |m| m + 1);
        let mut col_w = vec![0f64; layers];
        let mut col_h = vec![0f64; layers];
        for (i, n) in self.nodes.iter().enumerate() {
            let (w, h) = size(n);
            col_w[layer[i]] = col_w[layer[i]].max(w);
            col_h[layer[i]] += h + ROW_GAP;
        }
        let height = col_h.iter().cloned().fold(0.0, f64::max) + ROW_GAP;
        let mut col_x = vec![ROW_GAP; layers];
        for l in 1..layers {
            col_x[l] = col_x[l - 1] + col_w[l - 1] + COL_GAP;
        }
        let width = col_x.last().copied().unwrap_or(0.0) + col_w.last().copied().unwrap_or(0.0) + ROW_GAP;
        // Each column centred vertically, nodes in their order of creation.
        let mut next_y: Vec<f64> = col_h.iter().map(|h| (height - h) / 2.0 + ROW_GAP / 2.0).collect();
        let mut boxes = Vec::with_capacity(self.nodes.len());
        for (i, n) in self.nodes.iter().enumerate() {
            let (w, h) = size(n);
            let l = layer[i];
            boxes.push((col_x[l] + (col_w[l] - w) / 2.0, next_y[l], w, h));
            next_y[l] += h + ROW_GAP;
        }
        let mut out = String::new();
        let _ = write!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {width:.0} {height:.0}\" width=\"{width:.0}\" height=\"{height:.0}\" \
             font-family=\"sans-serif\" font-size=\"12\" class=\"topology\">\
             <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"8\" markerHeight=\"8\" orient=\"auto\">\
             <path d=\"M0,0 L10,5 L0,10 z\" fill=\"#555\"/></marker></defs>"
        );
        for e in &self.edges {
            let (fx, fy, fw, fh) = boxes[e.from];
            let (tx, ty, _, th) = boxes[e.to];
            let (x1, y1, x2, y2) = (fx + fw, fy + fh / 2.0, tx, ty + th / 2.0);
            let mid = (x1 + x2) / 2.0;
            let dash = if e.dashed { " stroke-dasharray=\"5,4\"" } else { "" };
            let _ = write!(
                out,
                "<path class=\"edge\" d=\"M{x1:.1},{y1:.1} C{mid:.1},{y1:.1} {mid:.1},{y2:.1} {x2:.1},{y2:.1}\" fill=\"none\" stroke=\"#555\"{dash} marker-end=\"url(#arrow)\"/>"
            );
            if !e.label.is_empty() {
                let _ = write!(
                    out,
                    "<text x=\"{mid:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#333\" font-size=\"10\"><title>{}</title>{}</text>",
                    (y1 + y2) / 2.0 - 4.0,
                    escape(&e.label),
                    escape(&clip(&e.label, LABEL_CHARS))
                );
            }
        }
        for (n, (x, y, w, h)) in self.nodes.iter().zip(&boxes) {
            let (fill, stroke, rx) = match n.kind {
                NodeKind::Topic => ("#e8f1fb", "#3b73b9", 0),
                NodeKind::SubTopology => ("#fdf6e3", "#b58900", 10),
                NodeKind::Sink => ("#eef8ee", "#2e8b57", 4),
            };
            let class = match n.kind {
                NodeKind::Topic => "topic",
                NodeKind::SubTopology => "sub-topology",
                NodeKind::Sink => "sink",
            };
            let _ = write!(
                out,
                "<g class=\"{class}\" id=\"{}\"><rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{w:.1}\" height=\"{h:.1}\" rx=\"{rx}\" fill=\"{fill}\" stroke=\"{stroke}\"/>",
                escape(&n.id)
            );
            for (k, line) in n.lines.iter().enumerate() {
                let weight = if k == 0 { " font-weight=\"bold\"" } else { "" };
                let _ = write!(
                    out,
                    "<text x=\"{:.1}\" y=\"{:.1}\"{weight}>{}</text>",
                    x + PAD,
                    y + PAD + LINE_H * (k as f64 + 0.75),
                    escape(&clip(line, MAX_CHARS))
                );
            }
            out.push_str("</g>");
        }
        out.push_str("</svg>\n");
        out
    }
}

impl TopologyPlan {
    /// The plan as an SVG picture.
    pub fn to_svg(&self, graph: &PipelineGraph) -> String {
        Picture::of(self, graph).to_svg()
    }
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut c: String = s.chars().take(max - 1).collect();
    c.push('…');
    c
}

/// Text as XML character data or attribute value.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(kind: NodeKind, title: &str) -> Node {
        Node { kind, lines: vec![title.into()], id: title.into() }
    }

    fn chain() -> Picture {
        Picture {
            nodes: vec![
                node(NodeKind::Topic, "in"),
                node(NodeKind::SubTopology, "sub 0"),
                node(NodeKind::Topic, "shuffle"),
                node(NodeKind::SubTopology, "sub 1"),
                node(NodeKind::Topic, "side"),
            ],
            edges: vec![
                Edge { from: 0, to: 1, label: "Read".into(), dashed: false },
                Edge { from: 1, to: 2, label: String::new(), dashed: false },
                Edge { from: 2, to: 3, label: "GroupByKey".into(), dashed: false },
                Edge { from: 4, to: 3, label: "side input s".into(), dashed: true },
            ],
        }
    }

    #[test]
    fn layers_follow_the_data() {
        assert_eq!(chain().layers(), vec![0, 1, 2, 3, 0]);
    }

    #[test]
    fn a_cycle_does_not_loop_forever() {
        let mut p = chain();
        p.edges.push(Edge { from: 3, to: 0, label: String::new(), dashed: false });
        let l = p.layers();
        assert!(l.iter().all(|x| *x < p.nodes.len()), "{l:?}");
        assert!(p.to_svg().starts_with("<svg"));
    }

    #[test]
    fn svg_has_every_node_edge_and_escapes_names() {
        let mut p = chain();
        p.nodes[1].lines.push("Map(<lambda at x.py:3>) & \"more\"".into());
        let svg = p.to_svg();
        assert_eq!(svg.matches("<g class=\"topic\"").count(), 3);
        assert_eq!(svg.matches("<g class=\"sub-topology\"").count(), 2);
        assert_eq!(svg.matches("class=\"edge\"").count(), 4);
        assert_eq!(svg.matches("stroke-dasharray").count(), 1);
        assert!(svg.contains("Map(&lt;lambda at x.py:3&gt;) &amp; &quot;more&quot;"));
        assert!(!svg.contains("<lambda"));
        // Later layers are further right.
        let x_of = |id: &str| {
            let at = svg.find(&format!("id=\"{id}\"")).unwrap();
            let rest = &svg[at..];
            let x = &rest[rest.find("x=\"").unwrap() + 3..];
            x[..x.find('"').unwrap()].parse::<f64>().unwrap()
        };
        assert!(x_of("in") < x_of("sub 0") && x_of("sub 0") < x_of("shuffle") && x_of("shuffle") < x_of("sub 1"));
    }

    #[test]
    fn long_names_are_clipped() {
        let long = "x".repeat(200);
        assert_eq!(clip(&long, MAX_CHARS).chars().count(), MAX_CHARS);
        assert_eq!(clip("short", MAX_CHARS), "short");
    }
}
