//! Changing the ACLs: the messages between cores, and what a change does to a set of ACLs
//! (plain logic; the shard writes the file and installs the result on every core).
//!
//! Core 0 owns the ACLs: a CreateAcls or DeleteAcls on any core becomes an
//! [`AclMessage::Change`] for core 0, which applies it ([`apply`]), rewrites the ACLs file
//! when something changed, sends [`AclMessage::Install`] to every other core and waits for
//! each to answer, then replies. Changes run one at a time.

use std::sync::Arc;

use borges_protocol::acl::{Acl, AclFilter};
use borges_protocol::ErrorCode;
use futures_channel::oneshot;

use super::Authorizer;
use crate::failure::Failure;

/// A message about the ACLs, for one core.
pub enum AclMessage {
    /// Use this set of ACLs from now on; reply once it is in force.
    Install {
        /// The new set.
        authorizer: Arc<Authorizer>,
        /// Answered once installed.
        reply: oneshot::Sender<()>,
    },
    /// For core 0: change the ACLs, then install them on every core.
    Change {
        /// The change.
        change: AclChange,
        /// The per-item outcomes, or why nothing changed.
        reply: oneshot::Sender<Result<AclChanged, Failure>>,
    },
}

/// A change, as decoded from a request: each item valid or already refused.
#[derive(Debug, Clone)]
pub enum AclChange {
    /// CreateAcls.
    Create(Vec<Result<Acl, Failure>>),
    /// DeleteAcls.
    Delete(Vec<Result<AclFilter, Failure>>),
}

/// What a change did, per item in request order.
#[derive(Debug, Clone, PartialEq)]
pub enum AclChanged {
    /// Per creation: added (or held already), or why not.
    Created(Vec<Result<(), Failure>>),
    /// Per filter: the ACLs it removed, or why not.
    Deleted(Vec<Result<Vec<Acl>, Failure>>),
}

/// Applies `change` to `current` within `acls_max` ACLs: the new set and the outcomes.
pub fn apply(current: &[Acl], change: AclChange, acls_max: usize) -> (Vec<Acl>, AclChanged) {
    let mut acls = current.to_vec();
    match change {
        AclChange::Create(items) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(item.and_then(|acl| create(&mut acls, acl, acls_max)));
            }
            (acls, AclChanged::Created(out))
        }
        AclChange::Delete(items) => {
            let mut out = Vec::with_capacity(items.len());
            for item in items {
                out.push(item.and_then(|filter| delete(&mut acls, &filter)));
            }
            (acls, AclChanged::Deleted(out))
        }
    }
}

fn create(acls: &mut Vec<Acl>, acl: Acl, acls_max: usize) -> Result<(), Failure> {
    if acls.contains(&acl) {
        return Ok(());
    }
    if acls.len() >= acls_max {
        return Err(Failure::new(
            ErrorCode::LimitExceeded,
            format!("the broker holds security.acls_max ({acls_max}) ACLs already"),
        ));
    }
    acls.push(acl);
    Ok(())
}

fn delete(acls: &mut Vec<Acl>, filter: &AclFilter) -> Result<Vec<Acl>, Failure> {
    if filter.is_empty() {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            "a DeleteAcls filter must name something (every field is \"any\")",
        ));
    }
    let (removed, kept): (Vec<Acl>, Vec<Acl>) = acls.drain(..).partition(|a| filter.matches(a));
    *acls = kept;
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use borges_protocol::acl::{Operation, PatternType, Permission, ResourceType};

    fn acl(principal: &str, name: &str) -> Acl {
        Acl {
            principal: principal.into(),
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern: PatternType::Literal,
            operation: Operation::Read,
            permission: Permission::Allow,
        }
    }

    #[test]
    fn creations_are_idempotent_and_bounded() {
        let invalid = Failure::new(ErrorCode::InvalidRequest, "bad");
        let change = AclChange::Create(vec![
            Ok(acl("User:a", "t")),
            Ok(acl("User:a", "t")),
            Err(invalid.clone()),
            Ok(acl("User:b", "t")),
        ]);
        let (acls, changed) = apply(&[acl("User:z", "t")], change, 2);
        assert_eq!(acls, vec![acl("User:z", "t"), acl("User:a", "t")]);
        let AclChanged::Created(out) = changed else {
            panic!("a creation")
        };
        assert_eq!(out[0], Ok(()));
        assert_eq!(out[1], Ok(()), "held already: a success that adds nothing");
        assert_eq!(out[2], Err(invalid));
        assert_eq!(
            out[3].as_ref().map_err(|f| f.code),
            Err(ErrorCode::LimitExceeded)
        );
    }

    #[test]
    fn deletions_remove_what_the_filter_names() {
        let current = [acl("User:a", "t"), acl("User:a", "u"), acl("User:b", "t")];
        let by_a = AclFilter {
            principal: Some("User:a".into()),
            ..AclFilter::default()
        };
        let change = AclChange::Delete(vec![Ok(by_a.clone()), Ok(AclFilter::default())]);
        let (acls, changed) = apply(&current, change, 10);
        assert_eq!(acls, vec![acl("User:b", "t")]);
        let AclChanged::Deleted(out) = changed else {
            panic!("a deletion")
        };
        assert_eq!(out[0], Ok(vec![acl("User:a", "t"), acl("User:a", "u")]));
        assert!(out[1].is_err(), "a filter naming everything is refused");
    }
}
