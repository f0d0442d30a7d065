//! The write of a whole-set metadata change (`ReplaceAcls`, `ReplaceScramCredentials`):
//! through the controller, then a wait until every core of this broker has applied the
//! image it leads to, committed or refused.

use borges_protocol::ErrorCode;

use crate::cluster::ClusterHandle;
use crate::failure::Failure;
use crate::metadata::MetadataChange;

/// What became of a replacement once written.
pub(super) enum Replaced {
    /// Committed; this broker's cores hold it (or the wait for them timed out, logged).
    Committed,
    /// Refused: another change came first; compute the change again on the newer set.
    Raced,
}

/// Writes `replace` through the controller and waits until this broker's cores have applied
/// the image (warning, naming `what` changed, when that takes longer than a request may).
pub(super) async fn write_applied(
    cluster: &ClusterHandle,
    replace: MetadataChange,
    what: &str,
) -> Result<Replaced, Failure> {
    let reply = cluster.write(replace).await?;
    // Committed or refused, the image moves on: wait until this broker's cores have it
    // (they then hold the new set, or the newer one to try again on).
    if !cluster
        .wait_applied(reply.index, cluster.request_timeout())
        .await
    {
        tracing::warn!(
            index = reply.index,
            "{what} change not applied on every core yet"
        );
    }
    match reply.error {
        None => Ok(Replaced::Committed),
        Some((code, _)) if code == ErrorCode::OperationInProgress as u16 => Ok(Replaced::Raced),
        Some((code, message)) => Err(Failure::new(ErrorCode::from_u16(code), message)),
    }
}
