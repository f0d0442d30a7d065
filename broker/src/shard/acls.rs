//! The core's ACLs: each core holds its own copy of the authorizer (an `Rc`, read without a
//! lock); core 0 owns changes (`acl::store`): it applies them one at a time, rewrites the
//! ACLs file, and installs the new set on every core before it answers.
//!
//! In a cluster the ACLs live in the metadata log instead (`MetadataImage::acls`): core 0
//! computes the new set from the image's and writes it as a `ReplaceAcls` through the
//! controller, then waits until every core of this broker has applied it; each core of every
//! broker installs the image's ACLs itself when it applies an image with a new
//! `acl_generation`. Until the first change (generation 0) the brokers' ACLs files are in
//! force, and the first change starts from this broker's file.

use std::rc::Rc;
use std::sync::Arc;

use borges_protocol::ErrorCode;
use borges_runtime::task;

use super::replace::{self, Replaced};
use super::{Shard, ShardMessage};
use crate::acl::store::{self, AclChange, AclChanged, AclMessage};
use crate::acl::Authorizer;
use crate::cluster::ClusterHandle;
use crate::failure::Failure;
use crate::metadata::{MetadataChange, MetadataImage};

impl Shard {
    /// This core's authorizer (its own copy; replaced whole on a change).
    pub fn authorizer(&self) -> Rc<Authorizer> {
        self.authorizer.borrow().clone()
    }

    /// The per-topic check of a request's topics for `operation` (`acl::check::TopicGate`).
    pub fn topic_gate<'a>(
        &'a self,
        principal: &'a str,
        api: borges_protocol::ApiKey,
        operation: borges_protocol::acl::Operation,
    ) -> crate::acl::check::TopicGate<'a> {
        let metrics = self.metrics();
        crate::acl::check::TopicGate::new(self.authorizer(), metrics, principal, api, operation)
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
        if let Some(cluster) = self.cluster_handle() {
            return self.change_cluster_acls(&cluster, change).await;
        }
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

    /// Core 0, in a cluster: the change as a `ReplaceAcls`, asked again on the newer ACLs
    /// while another broker's change comes first.
    async fn change_cluster_acls(
        self: &Rc<Self>,
        cluster: &Arc<ClusterHandle>,
        change: AclChange,
    ) -> Result<AclChanged, Failure> {
        let acls_max = self.config.security.acls_max as usize;
        for _ in 0..ACL_WRITE_ATTEMPTS_MAX {
            let image = cluster.latest();
            let current = self.cluster_acls(&image)?;
            let (acls, changed) = store::apply(&current, change.clone(), acls_max);
            if acls == current {
                return Ok(changed);
            }
            let replace = MetadataChange::ReplaceAcls {
                based_on: image.acl_generation,
                acls: acls.iter().map(crate::acl::file::to_record).collect(),
            };
            // The cores then hold the new ACLs, or the newer ones to try again on.
            match replace::write_applied(cluster, replace, "ACL").await? {
                Replaced::Committed => {
                    tracing::info!("ACLs changed in the metadata log: {} held", acls.len());
                    return Ok(changed);
                }
                Replaced::Raced => continue,
            }
        }
        Err(Failure::new(
            ErrorCode::OperationInProgress,
            "the cluster's ACLs kept changing under this change; try again",
        ))
    }

    /// The ACLs a cluster change starts from: the image's, or this broker's file's (in force
    /// here) while the metadata log has never held ACLs.
    fn cluster_acls(
        &self,
        image: &MetadataImage,
    ) -> Result<Vec<borges_protocol::acl::Acl>, Failure> {
        if image.acl_generation == 0 {
            return Ok(self.authorizer().acls().to_vec());
        }
        crate::acl::file::from_records(&image.acls)
            .map_err(|e| Failure::new(ErrorCode::UnknownServerError, e))
    }

    /// Installs the ACLs of `image` on this core when its generation is new (cluster mode).
    pub(super) fn install_cluster_acls(&self, image: &MetadataImage) {
        if image.acl_generation <= self.acl_generation.get() {
            return;
        }
        match crate::acl::file::from_records(&image.acls) {
            Ok(acls) => {
                let next = self.authorizer().with_acls(acls);
                self.install_acls(&next);
                self.acl_generation.set(image.acl_generation);
                if self.id == 0 {
                    tracing::info!(
                        generation = image.acl_generation,
                        "ACLs from the metadata log: {} in force",
                        next.acls().len()
                    );
                }
            }
            Err(e) => tracing::error!("the metadata log's ACLs are not installed: {e}"),
        }
    }
}

/// Times a cluster ACL change is computed and written again after losing a race.
const ACL_WRITE_ATTEMPTS_MAX: u32 = 8;
