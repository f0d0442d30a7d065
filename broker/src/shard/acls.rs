//! The core's ACLs: each core holds its own copy of the authorizer (an `Rc`, read without a
//! lock); core 0 owns changes (`acl::store`): it applies them one at a time, rewrites the
//! ACLs file, and installs the new set on every core before it answers.

use std::rc::Rc;
use std::sync::Arc;

use borges_protocol::ErrorCode;
use borges_runtime::task;

use super::{Shard, ShardMessage};
use crate::acl::store::{self, AclChange, AclChanged, AclMessage};
use crate::acl::Authorizer;
use crate::failure::Failure;

impl Shard {
    /// This core's authorizer (its own copy; replaced whole on a change).
    pub fn authorizer(&self) -> Rc<Authorizer> {
        self.authorizer.borrow().clone()
    }

    /// Puts `authorizer` in force on this core.
    pub fn install_acls(&self, authorizer: &Authorizer) {
        *self.authorizer.borrow_mut() = Rc::new(authorizer.clone());
    }

    pub(super) async fn execute_acl(self: &Rc<Self>, msg: AclMessage) {
        match msg {
            AclMessage::Install { authorizer, reply } => {
                self.install_acls(&authorizer);
                let _ = reply.send(());
            }
            AclMessage::Change { change, reply } => {
                let shard = self.clone();
                task::spawn(async move {
                    let _ = reply.send(shard.change_acls_here(change).await);
                })
                .detach();
            }
        }
    }

    /// Changes the ACLs (on core 0, asked from here when this is another core); the answer
    /// comes once every core has the new set.
    pub async fn change_acls(self: &Rc<Self>, change: AclChange) -> Result<AclChanged, Failure> {
        if self.id == 0 {
            return self.change_acls_here(change).await;
        }
        self.mesh
            .ask(0, |reply| {
                ShardMessage::Acl(AclMessage::Change { change, reply })
            })
            .await?
    }

    /// Core 0: one change at a time.
    async fn change_acls_here(self: &Rc<Self>, change: AclChange) -> Result<AclChanged, Failure> {
        strict_assert_eq!(self.id, 0, "ACL changes run on core 0");
        loop {
            let seen = self.acl_changed.generation();
            if !self.acl_changing.get() {
                break;
            }
            self.acl_changed.changed_since(seen).await;
        }
        self.acl_changing.set(true);
        let result = self.apply_acl_change(change).await;
        self.acl_changing.set(false);
        self.acl_changed.notify_all();
        result
    }

    async fn apply_acl_change(self: &Rc<Self>, change: AclChange) -> Result<AclChanged, Failure> {
        let current = self.authorizer();
        let acls_max = self.config.security.acls_max as usize;
        let (acls, changed) = store::apply(current.acls(), change, acls_max);
        if acls.as_slice() == current.acls() {
            return Ok(changed);
        }
        let path = self.config.security.acls_path(&self.config.data_dir);
        let written = acls.clone();
        task::spawn_blocking(move || crate::acl::file::write(&path, &written))
            .await
            .map_err(|e| {
                tracing::error!("ACLs not changed: {e}");
                Failure::new(
                    ErrorCode::StorageError,
                    format!("the ACLs file could not be written, nothing changed: {e}"),
                )
            })?;
        let next = Arc::new(current.with_acls(acls));
        self.install_acls(&next);
        for to in 1..self.cores() {
            let authorizer = next.clone();
            let installed = self.mesh.ask(to, |reply| {
                ShardMessage::Acl(AclMessage::Install { authorizer, reply })
            });
            if let Err(f) = installed.await {
                tracing::error!(core = to, "ACLs not installed: {f}");
            }
        }
        tracing::info!("ACLs changed: {} held", next.acls().len());
        Ok(changed)
    }
}
