//! What the HTTP API's handlers share: the JSON API ([`crate::http`]) and the web status page
//! ([`crate::ui`]) both take an [`ApiState`].

use std::sync::Arc;

use uuid::Uuid;

use crate::board::Board;
use crate::store::Store;

/// What the handlers share.
#[derive(Debug, Clone)]
pub struct ApiState {
    /// State database.
    pub store: Arc<Store>,
    /// Agents and last round.
    pub board: Arc<Board>,
    /// Serialises incident changes with the reconciler.
    pub incident_lock: Arc<tokio::sync::Mutex<()>>,
    /// This node's name.
    pub node_name: String,
    /// The users file that authorises writes (read on each write); `None` refuses every write.
    pub users: Option<std::path::PathBuf>,
    /// Key of the web page's CSRF tokens, drawn at start.
    pub csrf_key: Arc<[u8; 32]>,
    /// Most nodes disrupted at once (shown on the web page).
    pub max_disrupted_nodes: usize,
    /// Ganeti, for the web page's acknowledgement (tag removal); `None` disables it.
    pub ganeti: Option<Arc<dyn crate::ganeti::Ganeti>>,
    /// Signs requests to the agents (`nodecare check`); `None` disables them.
    pub agents: Option<crate::repair::RepairClient>,
    /// How old the last round's view of the cluster may be for an admission request to be
    /// judged against it ([`crate::admission::view_max_age`]).
    pub gate_view_max_age: std::time::Duration,
}

/// A fresh random key for [`ApiState::csrf_key`].
pub fn random_key() -> Arc<[u8; 32]> {
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(Uuid::new_v4().as_bytes());
    key[16..].copy_from_slice(Uuid::new_v4().as_bytes());
    Arc::new(key)
}
