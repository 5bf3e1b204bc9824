//! The one Python object the runner writes itself: the window mapping
//! function that tells a window's last timestamp (see `window_fns`).
//!
//! Python's SDK reads a pickled function as `pickler.loads` does: base64 of
//! the bzip2-compressed pickle. The pickle only calls functions of the SDK
//! the pipeline runs with (opcodes GLOBAL and REDUCE of protocol 2), so it
//! needs no code of ours in the harness:
//! `sideinputs.default_window_mapping_fn(window.FixedWindows(Duration(0, 1000)))`,
//! which maps a window onto the 1 ms fixed window holding its last timestamp.
use std::io::Write;

const PROTO: u8 = 0x80;
const GLOBAL: u8 = b'c';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const TUPLE1: u8 = 0x85;
const TUPLE2: u8 = 0x86;
const REDUCE: u8 = b'R';
const STOP: u8 = b'.';

fn global(module: &str, name: &str, out: &mut Vec<u8>) {
    out.push(GLOBAL);
    out.extend_from_slice(format!("{module}\n{name}\n").as_bytes());
}

/// The pickle itself (protocol 2), uncompressed.
pub fn window_end_mapping_pickle() -> Vec<u8> {
    let mut p = vec![PROTO, 2];
    global("apache_beam.transforms.sideinputs", "default_window_mapping_fn", &mut p);
    global("apache_beam.transforms.window", "FixedWindows", &mut p);
    // Duration(seconds=0, micros=1000): exactly 1 ms, no float rounding.
    global("apache_beam.utils.timestamp", "Duration", &mut p);
    p.extend_from_slice(&[BININT1, 0, BININT2]);
    p.extend_from_slice(&1000u16.to_le_bytes());
    p.extend_from_slice(&[TUPLE2, REDUCE, TUPLE1, REDUCE, TUPLE1, REDUCE, STOP]);
    p
}

/// The mapping function as `map_windows` takes it (`pickler.loads` form).
pub fn window_end_mapping_fn() -> Vec<u8> {
    let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
    bz.write_all(&window_end_mapping_pickle()).expect("writing to memory");
    base64(&bz.finish().expect("compressing in memory")).into_bytes()
}

/// Standard base64 with padding (what Python's `base64.b64decode` reads).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet_and_padding() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foob"), "Zm9vYg==");
        assert_eq!(base64(&[0xfb, 0xff]), "+/8=");
    }

    #[test]
    fn the_pickle_calls_beam_functions_only_and_ends() {
        let p = window_end_mapping_pickle();
        assert_eq!(&p[..2], &[PROTO, 2]);
        assert_eq!(*p.last().unwrap(), STOP);
        let text = String::from_utf8_lossy(&p);
        for name in ["default_window_mapping_fn", "FixedWindows", "Duration"] {
            assert!(text.contains(name), "{name}");
        }
        assert_eq!(p.iter().filter(|&&b| b == REDUCE).count(), 3, "three calls");
    }

    #[test]
    fn the_function_is_base64_of_bzip2() {
        let f = window_end_mapping_fn();
        assert!(f.iter().all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(b)));
        // "BZh" (bzip2's magic) in base64.
        assert!(f.starts_with(b"Qlpo"));
    }
}
