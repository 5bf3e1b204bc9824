//! What a stage's bundles reach through the State API: the task's side
//! inputs (read-only) and its stateful ParDos' user state. User state changes
//! land in memory at once and reach the changelog in the task's next commit
//! cycle, taken once every bundle before the flush finished.
use std::sync::{Arc, Mutex};

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

impl StateHandler for BundleState {
    fn handle(&self, request: &fn_pb::StateRequest) -> Result<Response, String> {
        match request.state_key.as_ref().and_then(|k| k.r#type.as_ref()) {
            Some(Key::BagUserState(k)) => {
                let user = self.user.as_ref().ok_or_else(|| format!("'{}' has no user state in this runner's plan", k.transform_id))?;
                let cell = StateCell { transform: k.transform_id.clone(), state_id: k.user_state_id.clone(), key: k.key.clone(), window: k.window.clone(), map_key: None };
                let mut state = user.lock().expect("user state lock");
                match &request.request {
                    Some(Request::Get(_)) => {
                        Ok(Response::Get(fn_pb::StateGetResponse { continuation_token: Vec::new(), data: state.get(&cell).to_vec() }))
                    }
                    Some(Request::Append(a)) => {
                        state.append(cell, &a.data);
                        Ok(Response::Append(fn_pb::StateAppendResponse {}))
                    }
                    Some(Request::Clear(_)) => {
                        state.clear(cell);
                        Ok(Response::Clear(fn_pb::StateClearResponse {}))
                    }
                    None => Err("an empty state request".into()),
                }
            }
            Some(Key::OrderedListUserState(k)) => {
                let user = self.user.as_ref().ok_or_else(|| format!("'{}' has no user state in this runner's plan", k.transform_id))?;
                let cell = StateCell { transform: k.transform_id.clone(), state_id: k.user_state_id.clone(), key: k.key.clone(), window: k.window.clone(), map_key: None };
                let (start, end) = k.range.as_ref().map_or((i64::MIN, i64::MAX), |r| (r.start, r.end));
                let mut state = user.lock().expect("user state lock");
                match &request.request {
                    Some(Request::Get(_)) => {
                        Ok(Response::Get(fn_pb::StateGetResponse { continuation_token: Vec::new(), data: state.ordered_get(&cell, start, end)? }))
                    }
                    Some(Request::Append(a)) => {
                        state.ordered_append(cell, &a.data)?;
                        Ok(Response::Append(fn_pb::StateAppendResponse {}))
                    }
                    Some(Request::Clear(_)) => {
                        state.ordered_clear(cell, start, end)?;
                        Ok(Response::Clear(fn_pb::StateClearResponse {}))
                    }
                    None => Err("an empty state request".into()),
                }
            }
            Some(Key::MultimapUserState(k)) => {
                let user = self.user.as_ref().ok_or_else(|| format!("'{}' has no user state in this runner's plan", k.transform_id))?;
                let cell = StateCell {
                    transform: k.transform_id.clone(),
                    state_id: k.user_state_id.clone(),
                    key: k.key.clone(),
                    window: k.window.clone(),
                    map_key: Some(k.map_key.clone()),
                };
                let mut state = user.lock().expect("user state lock");
                match &request.request {
                    Some(Request::Get(_)) => {
                        Ok(Response::Get(fn_pb::StateGetResponse { continuation_token: Vec::new(), data: state.get(&cell).to_vec() }))
                    }
                    Some(Request::Append(a)) => {
                        state.map_append(cell, &a.data);
                        Ok(Response::Append(fn_pb::StateAppendResponse {}))
                    }
                    Some(Request::Clear(_)) => {
                        state.clear(cell);
                        Ok(Response::Clear(fn_pb::StateClearResponse {}))
                    }
                    None => Err("an empty state request".into()),
                }
            }
            Some(Key::MultimapKeysUserState(k)) => {
                let user = self.user.as_ref().ok_or_else(|| format!("'{}' has no user state in this runner's plan", k.transform_id))?;
                let map = StateCell { transform: k.transform_id.clone(), state_id: k.user_state_id.clone(), key: k.key.clone(), window: k.window.clone(), map_key: None };
                let mut state = user.lock().expect("user state lock");
                match &request.request {
                    Some(Request::Get(_)) => {
                        Ok(Response::Get(fn_pb::StateGetResponse { continuation_token: Vec::new(), data: state.map_keys(&map) }))
                    }
                    Some(Request::Clear(_)) => {
                        state.map_clear(&map);
                        Ok(Response::Clear(fn_pb::StateClearResponse {}))
                    }
                    Some(Request::Append(_)) => Err("an append to the keys of a multimap (append to one key's values instead)".into()),
                    None => Err("an empty state request".into()),
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
