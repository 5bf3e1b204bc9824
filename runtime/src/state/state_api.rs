//! The State API as the runtime answers it: user-state requests applied to
//! a task's [`UserState`]. (Side-input requests are answered by the task's
//! side inputs; the actors route between the two.)
//!
//! Long answers come in pages when the runner knows where each element
//! ends ([`Elements`], side inputs): an SDK decodes each page on its own, so
//! a page must end on an element boundary. Bags of user state hold opaque
//! bytes and are answered whole (every Fn API message may be 256 MiB).

use beam_kafka_proto::fn_execution as fn_pb;
use fn_pb::state_key::Type as Key;
use fn_pb::state_request::Request;
use fn_pb::state_response::Response;

use crate::state::user_state::{StateCell, UserState};

/// The transform whose user state a request names; `None` for every other
/// kind of request.
pub fn user_state_transform(request: &fn_pb::StateRequest) -> Option<&str> {
    match request.state_key.as_ref()?.r#type.as_ref()? {
        Key::BagUserState(k) => Some(&k.transform_id),
        Key::OrderedListUserState(k) => Some(&k.transform_id),
        Key::MultimapUserState(k) => Some(&k.transform_id),
        Key::MultimapKeysUserState(k) => Some(&k.transform_id),
        Key::MultimapEntriesUserState(k) => Some(&k.transform_id),
        _ => None,
    }
}

fn cell(transform: &str, state_id: &str, key: &[u8], window: &[u8], map_key: Option<&[u8]>) -> StateCell {
    StateCell {
        transform: transform.to_string(),
        state_id: state_id.to_string(),
        key: key.to_vec(),
        window: window.to_vec(),
        map_key: map_key.map(<[u8]>::to_vec),
    }
}

pub fn got(data: Vec<u8>) -> Response {
    Response::Get(fn_pb::StateGetResponse { continuation_token: Vec::new(), data })
}

const APPENDED: Response = Response::Append(fn_pb::StateAppendResponse {});
const CLEARED: Response = Response::Clear(fn_pb::StateClearResponse {});

/// Get, append (the kind's own way) or clear one cell.
fn on_cell(
    state: &mut UserState,
    c: StateCell,
    op: &Request,
    append: fn(&mut UserState, StateCell, &[u8]) -> Result<(), String>,
) -> Result<Response, String> {
    Ok(match op {
        Request::Get(_) => got(state.get(&c)?.to_vec()),
        Request::Append(a) => {
            append(state, c, &a.data)?;
            APPENDED
        }
        Request::Clear(_) => {
            state.clear(c)?;
            CLEARED
        }
    })
}

/// Applies a user-state request (see [`user_state_transform`]) to `state`.
pub fn serve_user_state(state: &mut UserState, request: &fn_pb::StateRequest) -> Result<Response, String> {
    let op = request.request.as_ref().ok_or("an empty state request")?;
    match request.state_key.as_ref().and_then(|k| k.r#type.as_ref()) {
        // Python's bag, combining, value and set state.
        Some(Key::BagUserState(k)) => {
            let c = cell(&k.transform_id, &k.user_state_id, &k.key, &k.window, None);
            on_cell(state, c, op, UserState::append)
        }
        Some(Key::OrderedListUserState(k)) => {
            let c = cell(&k.transform_id, &k.user_state_id, &k.key, &k.window, None);
            let (start, end) = k.range.as_ref().map_or((i64::MIN, i64::MAX), |r| (r.start, r.end));
            Ok(match op {
                Request::Get(_) => got(state.ordered_get(&c, start, end)?),
                Request::Append(a) => {
                    state.ordered_append(c, &a.data)?;
                    APPENDED
                }
                Request::Clear(_) => {
                    state.ordered_clear(c, start, end)?;
                    CLEARED
                }
            })
        }
        // Go's (and Java's) map and set state: one map key's values ...
        Some(Key::MultimapUserState(k)) => {
            let c = cell(&k.transform_id, &k.user_state_id, &k.key, &k.window, Some(&k.map_key));
            on_cell(state, c, op, UserState::map_append)
        }
        // ... and the map's keys.
        Some(Key::MultimapKeysUserState(k)) => {
            let map = cell(&k.transform_id, &k.user_state_id, &k.key, &k.window, None);
            match op {
                Request::Get(_) => Ok(got(state.map_keys(&map)?)),
                Request::Clear(_) => {
                    state.map_clear(&map)?;
                    Ok(CLEARED)
                }
                Request::Append(_) => Err("an append to the keys of a multimap (append to one key's values instead)".into()),
            }
        }
        // ... and every key with its values (Java's MultimapState.entries()).
        Some(Key::MultimapEntriesUserState(k)) => {
            let map = cell(&k.transform_id, &k.user_state_id, &k.key, &k.window, None);
            match op {
                Request::Get(_) => Ok(got(state.map_entries(&map)?)),
                Request::Clear(_) => {
                    state.map_clear(&map)?;
                    Ok(CLEARED)
                }
                Request::Append(_) => Err("an append to the entries of a multimap (append to one key's values instead)".into()),
            }
        }
        _ => Err("not a user state request".into()),
    }
}

/// The most data one paged answer carries (one larger element is a page
/// of its own).
pub const PAGE_BYTES: usize = 1 << 20;

/// Encoded elements one after another, with where each ends: an answer to
/// a State API read, served in pages that end on element boundaries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Elements {
    bytes: Vec<u8>,
    ends: Vec<usize>,
}

impl Elements {
    pub const EMPTY: Elements = Elements { bytes: Vec::new(), ends: Vec::new() };

    pub fn push(&mut self, element: &[u8]) {
        self.bytes.extend_from_slice(element);
        self.ends.push(self.bytes.len());
    }

    /// Every element, concatenated.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The page starting where `token` says (empty: at the start), of whole
    /// elements up to `page_bytes`, and the token of the next page (empty
    /// after the last). Elements are only ever appended, so a token stays
    /// good while more arrive.
    pub fn page(&self, token: &[u8], page_bytes: usize) -> Result<(Vec<u8>, Vec<u8>), String> {
        let start = if token.is_empty() {
            0
        } else {
            let raw: [u8; 8] = token.try_into().map_err(|_| "an unknown continuation token")?;
            let at = u64::from_be_bytes(raw) as usize;
            if self.ends.binary_search(&at).is_err() {
                return Err("an unknown continuation token".into());
            }
            at
        };
        let first = self.ends.partition_point(|&e| e <= start);
        let Some(&first_end) = self.ends.get(first) else { return Ok((Vec::new(), Vec::new())) };
        let limit = start.saturating_add(page_bytes).max(first_end);
        let end = self.ends[first..].iter().take_while(|&&e| e <= limit).last().copied().unwrap_or(first_end);
        let next = if end < self.bytes.len() { (end as u64).to_be_bytes().to_vec() } else { Vec::new() };
        Ok((self.bytes[start..end].to_vec(), next))
    }
}

/// A Get answer: the page of `elements` the request's token asks for.
pub fn paged(elements: &Elements, request: &fn_pb::StateRequest) -> Result<Response, String> {
    let token = match &request.request {
        Some(Request::Get(g)) => g.continuation_token.as_slice(),
        _ => &[],
    };
    let (data, continuation_token) = elements.page(token, PAGE_BYTES)?;
    Ok(Response::Get(fn_pb::StateGetResponse { continuation_token, data }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bag(op: Request) -> fn_pb::StateRequest {
        let key =
            fn_pb::state_key::BagUserState { transform_id: "t".into(), user_state_id: "s".into(), window: vec![], key: b"k".to_vec() };
        fn_pb::StateRequest {
            id: "1".into(),
            instruction_id: "b".into(),
            state_key: Some(fn_pb::StateKey { r#type: Some(Key::BagUserState(key)) }),
            request: Some(op),
        }
    }

    #[test]
    fn pages_end_on_element_boundaries_and_cover_everything_once() {
        let mut e = Elements::default();
        let sizes = [3usize, 5, 1, 9, 2, 2, 7];
        for (i, n) in sizes.iter().enumerate() {
            e.push(&vec![i as u8; *n]);
        }
        let (mut all, mut token, mut pages) = (Vec::new(), Vec::new(), 0);
        loop {
            let (page, next) = e.page(&token, 6).unwrap();
            // Whole elements only: every page starts with a new element's byte.
            assert!(page.windows(2).all(|w| w[0] <= w[1]));
            all.extend(page);
            pages += 1;
            if next.is_empty() {
                break;
            }
            token = next;
        }
        assert_eq!(all, e.bytes());
        assert_eq!(pages, 5, "[3] [5,1] [9] [2,2] [7]");
        assert!(e.page(&3u64.to_be_bytes()[..4], 6).is_err());
        assert!(e.page(&4u64.to_be_bytes(), 6).is_err(), "not an element boundary");
        assert_eq!(Elements::default().page(&[], 6).unwrap(), (vec![], vec![]));
        // A token stays good while elements are appended.
        let (_, next) = e.page(&[], 6).unwrap();
        e.push(&[9]);
        assert!(e.page(&next, 6).is_ok());
    }

    #[test]
    fn bag_requests_append_read_and_clear() {
        let mut s = UserState::default();
        let append = |d: &[u8]| bag(Request::Append(fn_pb::StateAppendRequest { data: d.to_vec() }));
        assert_eq!(user_state_transform(&append(b"x")), Some("t"));
        serve_user_state(&mut s, &append(b"ab")).unwrap();
        serve_user_state(&mut s, &append(b"c")).unwrap();
        let get = bag(Request::Get(fn_pb::StateGetRequest::default()));
        assert_eq!(serve_user_state(&mut s, &get).unwrap(), got(b"abc".to_vec()));
        serve_user_state(&mut s, &bag(Request::Clear(fn_pb::StateClearRequest {}))).unwrap();
        assert_eq!(serve_user_state(&mut s, &get).unwrap(), got(Vec::new()));
        let empty = fn_pb::StateRequest { request: None, ..get };
        assert!(serve_user_state(&mut s, &empty).is_err());
    }

    fn request(key: Key, op: Request) -> fn_pb::StateRequest {
        let state_key = Some(fn_pb::StateKey { r#type: Some(key) });
        fn_pb::StateRequest { id: "1".into(), instruction_id: "b".into(), state_key, request: Some(op) }
    }

    #[test]
    fn multimap_entries_list_each_key_with_its_value_count() {
        let mut s = UserState::default();
        s.set_map_value_coders([(("t".to_string(), "m".to_string()), crate::codec::coder::Coder::Varint)].into());
        let put = |map_key: &[u8], data: &[u8]| {
            let key = fn_pb::state_key::MultimapUserState {
                transform_id: "t".into(),
                user_state_id: "m".into(),
                window: vec![],
                key: b"k".to_vec(),
                map_key: map_key.to_vec(),
            };
            request(Key::MultimapUserState(key), Request::Append(fn_pb::StateAppendRequest { data: data.to_vec() }))
        };
        serve_user_state(&mut s, &put(b"\x01b", b"\x07")).unwrap();
        serve_user_state(&mut s, &put(b"\x01a", b"\x01\x02")).unwrap();
        serve_user_state(&mut s, &put(b"\x01a", b"\x03")).unwrap();
        let entries = |state_id: &str, op: Request| {
            let key = fn_pb::state_key::MultimapEntriesUserState {
                transform_id: "t".into(),
                user_state_id: state_id.into(),
                window: vec![],
                key: b"k".to_vec(),
            };
            request(Key::MultimapEntriesUserState(key), op)
        };
        let get = entries("m", Request::Get(fn_pb::StateGetRequest::default()));
        assert_eq!(user_state_transform(&get), Some("t"));
        let want = b"\x01a\x00\x00\x00\x03\x01\x02\x03\x01b\x00\x00\x00\x01\x07".to_vec();
        assert_eq!(serve_user_state(&mut s, &get).unwrap(), got(want));
        // A state the stage does not declare as a multimap is an error, not a guess.
        assert!(serve_user_state(&mut s, &entries("other", Request::Get(fn_pb::StateGetRequest::default()))).is_err());
        serve_user_state(&mut s, &entries("m", Request::Clear(fn_pb::StateClearRequest {}))).unwrap();
        assert_eq!(serve_user_state(&mut s, &get).unwrap(), got(Vec::new()));
    }
}
