//! SCRAM users (AlterUserScramCredentials, DescribeUserScramCredentials; docs/operations.md
//! "SASL"). The credential store (`sasl::Sasl`) is one per process, shared by every core.
//!
//! In a cluster the credentials live in the metadata log (`MetadataImage::scram_credentials`):
//! the core that serves a change computes the new set from the image's and writes it as a
//! `ReplaceScramCredentials` through the controller (asked again on the newer set when another
//! change came first), then waits until every core of this broker has applied it. Every core
//! of every broker installs the image's credentials into the store when it applies an image
//! with a new `scram_generation` (the first core to do so wins; the store keeps the
//! generation). Until the first change (generation 0) each broker's credentials file is in
//! force, and the first change starts from this broker's file (so the inter-broker user in it
//! is carried over).
//!
//! On a single node the change edits the credentials file (`sasl.credentials_file`) as
//! `borges user` does, one edit at a time in the process, and re-reads it into the store
//! before it answers.

use std::rc::Rc;
use std::sync::{Arc, Mutex};

use borges_protocol::scram::Mechanism;
use borges_protocol::ErrorCode;
use borges_replication::metadata::SCRAM_CREDENTIALS_MAX;
use borges_runtime::task;

use super::replace::{self, Replaced};
use super::Shard;
use crate::cluster::ClusterHandle;
use crate::failure::Failure;
use crate::metadata::{MetadataChange, MetadataImage};
use crate::sasl::file::{self, UserCredential};
use crate::sasl::users::{self, Alterations, UserResult};

/// Times a cluster change is computed and written again after losing a race.
const SCRAM_WRITE_ATTEMPTS_MAX: u32 = 8;

/// One credentials-file edit at a time in the process (any core may serve a change).
static FILE_EDITS: Mutex<()> = Mutex::new(());

fn storage_failure(e: file::CredentialsError) -> Failure {
    tracing::error!("SCRAM credentials not changed: {e}");
    Failure::new(
        ErrorCode::StorageError,
        format!("the credentials file could not be read or written, nothing changed: {e}"),
    )
}

impl Shard {
    /// Applies an AlterUserScramCredentials; per user, its outcome.
    pub async fn alter_scram_credentials(
        self: &Rc<Self>,
        alterations: Alterations,
    ) -> Result<Vec<UserResult>, Failure> {
        match self.cluster_handle() {
            Some(cluster) => self.alter_cluster_credentials(&cluster, alterations).await,
            None => self.alter_file_credentials(alterations).await,
        }
    }

    /// The credentials in force for this broker: the metadata log's once it holds some (the
    /// image this core applied), else the credentials file's.
    pub async fn scram_credentials(&self) -> Result<Vec<UserCredential>, Failure> {
        let image = self.image();
        if self.cluster_handle().is_some() && image.scram_generation > 0 {
            return file::from_records(&image.scram_credentials)
                .map_err(|e| Failure::new(ErrorCode::UnknownServerError, e));
        }
        self.file_credentials().await
    }

    /// The inter-broker user and mechanism of this broker's configuration, whose credential an
    /// alteration may not delete (`users::Bounds`).
    fn inter_broker_credential(&self) -> Option<(String, Mechanism)> {
        let sasl = &self.config.sasl;
        let name = sasl.inter_broker_username.clone()?;
        Some((name, sasl.inter_broker_mechanism()?))
    }

    async fn file_credentials(&self) -> Result<Vec<UserCredential>, Failure> {
        let path = self.config.sasl.credentials_path(&self.config.data_dir);
        task::spawn_blocking(move || file::read(&path))
            .await
            .map_err(storage_failure)
    }

    async fn alter_file_credentials(
        &self,
        alterations: Alterations,
    ) -> Result<Vec<UserResult>, Failure> {
        let path = self.config.sasl.credentials_path(&self.config.data_dir);
        let sasl = self.sasl();
        let inter_broker = self.inter_broker_credential();
        task::spawn_blocking(move || -> Result<_, file::CredentialsError> {
            let _one = FILE_EDITS.lock().unwrap_or_else(|p| p.into_inner());
            let current = file::read(&path)?;
            let bounds = users::Bounds {
                credentials_max: file::CREDENTIALS_MAX,
                protected: inter_broker.as_ref().map(|(n, m)| (n.as_str(), *m)),
            };
            let (next, results) = users::alter(&current, &alterations, bounds);
            if next != current {
                file::write(&path, &next)?;
                if let Some(sasl) = sasl {
                    sasl.reload()?;
                }
                tracing::info!(
                    "SCRAM credentials changed: {} in {}",
                    next.len(),
                    path.display()
                );
            }
            Ok(results)
        })
        .await
        .map_err(storage_failure)
    }

    /// In a cluster: the change as a `ReplaceScramCredentials`, asked again on the newer
    /// credentials while another change comes first.
    async fn alter_cluster_credentials(
        &self,
        cluster: &Arc<ClusterHandle>,
        alterations: Alterations,
    ) -> Result<Vec<UserResult>, Failure> {
        for _ in 0..SCRAM_WRITE_ATTEMPTS_MAX {
            let image = cluster.latest();
            let current = self.cluster_base(&image).await?;
            let inter_broker = self.inter_broker_credential();
            let bounds = users::Bounds {
                credentials_max: SCRAM_CREDENTIALS_MAX,
                protected: inter_broker.as_ref().map(|(n, m)| (n.as_str(), *m)),
            };
            let (next, results) = users::alter(&current, &alterations, bounds);
            if next == current {
                return Ok(results);
            }
            let replace = MetadataChange::ReplaceScramCredentials {
                based_on: image.scram_generation,
                credentials: next.iter().map(file::to_record).collect(),
            };
            // The store then holds the new credentials, or the newer ones to try again on.
            match replace::write_applied(cluster, replace, "SCRAM").await? {
                Replaced::Committed => {
                    tracing::info!(
                        "SCRAM credentials changed in the metadata log: {}",
                        next.len()
                    );
                    return Ok(results);
                }
                Replaced::Raced => continue,
            }
        }
        Err(Failure::new(
            ErrorCode::OperationInProgress,
            "the cluster's SCRAM credentials kept changing under this change; try again",
        ))
    }

    /// The credentials a cluster change starts from: the image's, or this broker's file's
    /// while the metadata log has never held credentials.
    async fn cluster_base(&self, image: &MetadataImage) -> Result<Vec<UserCredential>, Failure> {
        if image.scram_generation == 0 {
            return self.file_credentials().await;
        }
        file::from_records(&image.scram_credentials)
            .map_err(|e| Failure::new(ErrorCode::UnknownServerError, e))
    }

    /// Installs the SCRAM credentials of `image` into the process's store when its
    /// generation is newer than the store's (cluster mode; a no-op without SASL).
    pub(super) fn install_cluster_credentials(&self, image: &MetadataImage) {
        let Some(sasl) = self.sasl() else {
            return;
        };
        if image.scram_generation <= sasl.metadata_generation() {
            return;
        }
        match file::from_records(&image.scram_credentials) {
            Ok(users) => {
                let count = users.len();
                if sasl.install_from_metadata(image.scram_generation, users) {
                    tracing::info!(
                        core = self.id,
                        generation = image.scram_generation,
                        "SCRAM credentials from the metadata log: {count} in force"
                    );
                }
            }
            Err(e) => {
                tracing::error!("the metadata log's SCRAM credentials are not installed: {e}")
            }
        }
    }
}
