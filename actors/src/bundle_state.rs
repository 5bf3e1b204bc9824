//! What a stage's bundles reach through the State API: the task's side
//! inputs (read-only) and its stateful ParDos' user state. User state changes
//! land in memory at once and reach the changelog in the task's next commit
//! cycle, taken once every bundle before the flush finished.
use std::sync::{Arc, Mutex, MutexGuard};

use beam_kafka_fnapi::state::kind_of;
use beam_kafka_fnapi::StateHandler;
use beam_kafka_proto::fn_execution as fn_pb;
use beam_kafka_runtime::user_state::{StateCell, UserState};
use fn_pb::state_key::Type as Key;
use fn_pb::state_request::Request;
use fn_pb::state_response::Response;

use crate::side_inputs::SideInputs;

pub struct BundleState {
    pub side: Option<Arc<SideInputs>>,
    pub user: Option<Arc<Mutex<UserState>>>,
}

impl BundleState {
    /// The user state of `transform`'s task, locked for one request.
    fn user(&self, transform: &str) -> Result<MutexGuard<'_, UserState>, String> {
        let user = self.user.as_ref().ok_or_else(|| format!("'{transform}' has no user state in this runner's plan"))?;
        Ok(user.lock().expect("user state lock"))
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

fn got(data: Vec<u8>) -> Response {
    Response::Get(fn_pb::StateGetResponse { continuation_token: Vec::new(), data })
}

/// Get, append (the kind's own way) or clear one cell.
fn on_cell(state: &mut UserState, c: StateCell, op: &Request, append: fn(&mut UserState, StateCell, &[u8])) -> Response {
    match op {
        Request::Get(_) => got(state.get(&c).to_vec()),
        Request::Append(a) => {
            append(state, c, &a.data);
            APPENDED
        }
        Request::Clear(_) => {
            state.clear(c);
            CLEARED
        }
    }
}

const APPENDED: Response = Response::Append(fn_pb::StateAppendResponse {});
const CLEARED: Response = Response::Clear(fn_pb::StateClearResponse {});

impl StateHandler for BundleState {
    /// A user-state token of the task incarnation's state, and one per side
    /// input naming its current contents.
    fn cache_tokens(&self) -> Vec<fn_pb::process_bundle_request::CacheToken> {
        use fn_pb::process_bundle_request::cache_token;
        let mut tokens = self.side.as_ref().map(|s| s.cache_tokens()).unwrap_or_default();
        if let Some(user) = self.user.as_ref() {
            let token = user.lock().expect("user state lock").cache_token();
            tokens.push(fn_pb::process_bundle_request::CacheToken {
                token,
                r#type: Some(cache_token::Type::UserState(cache_token::UserState {})),
            });
        }
        tokens
    }

    fn handle(&self, request: &fn_pb::StateRequest) -> Result<Response, String> {
        let op = request.request.as_ref().ok_or("an empty state request")?;
        match request.state_key.as_ref().and_then(|k| k.r#type.as_ref()) {
            // Python's bag, combining, value and set state.
            Some(Key::BagUserState(k)) => {
                let c = cell(&k.transform_id, &k.user_state_id, &k.key, &k.window, None);
                Ok(on_cell(&mut *self.user(&k.transform_id)?, c, op, UserState::append))
            }
            Some(Key::OrderedListUserState(k)) => {
                let c = cell(&k.transform_id, &k.user_state_id, &k.key, &k.window, None);
                let (start, end) = k.range.as_ref().map_or((i64::MIN, i64::MAX), |r| (r.start, r.end));
                let mut state = self.user(&k.transform_id)?;
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
                Ok(on_cell(&mut *self.user(&k.transform_id)?, c, op, UserState::map_append))
            }
            // ... and the map's keys.
            Some(Key::MultimapKeysUserState(k)) => {
                let map = cell(&k.transform_id, &k.user_state_id, &k.key, &k.window, None);
                let mut state = self.user(&k.transform_id)?;
                match op {
                    Request::Get(_) => Ok(got(state.map_keys(&map))),
                    Request::Clear(_) => {
                        state.map_clear(&map);
                        Ok(CLEARED)
                    }
                    Request::Append(_) => Err("an append to the keys of a multimap (append to one key's values instead)".into()),
                }
            }
            Some(Key::IterableSideInput(_) | Key::MultimapSideInput(_) | Key::MultimapKeysSideInput(_)) => match &self.side {
                Some(side) => side.handle(request),
                None => Err(format!("this stage reads no side inputs ({} request)", kind_of(request))),
            },
            _ => Err(format!("the runner does not serve {} state requests yet", kind_of(request))),
        }
    }
}
