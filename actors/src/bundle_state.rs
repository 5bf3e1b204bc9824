//! What a stage's bundles reach through the State API: the task's side
//! inputs (read-only) and its stateful ParDos' user state. User state changes
//! land in memory at once and reach the changelog in the task's next commit
//! cycle, taken once every bundle before the flush finished.
use std::sync::{Arc, Mutex, MutexGuard};

use beam_kafka_fnapi::state::kind_of;
use beam_kafka_fnapi::StateHandler;
use beam_kafka_proto::fn_execution as fn_pb;
use beam_kafka_runtime::state::state_api;
use beam_kafka_runtime::state::user_state::UserState;
use fn_pb::state_key::Type as Key;
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
        if let Some(transform) = state_api::user_state_transform(request) {
            return state_api::serve_user_state(&mut *self.user(transform)?, request);
        }
        match request.state_key.as_ref().and_then(|k| k.r#type.as_ref()) {
            Some(Key::IterableSideInput(_) | Key::MultimapSideInput(_) | Key::MultimapKeysSideInput(_)) => match &self.side {
                Some(side) => side.handle(request),
                None => Err(format!("this stage reads no side inputs ({} request)", kind_of(request))),
            },
            _ => Err(format!("the runner does not serve {} state requests yet", kind_of(request))),
        }
    }
}
