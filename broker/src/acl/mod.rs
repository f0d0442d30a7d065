//! Authorization with ACLs in Kafka's model (issue 20; docs/operations.md "ACLs").
//!
//! - [`Authorizer`]: one immutable set of ACLs with the `[security]` settings; decides whether
//!   a principal may do an operation on a resource. Deny wins over allow; super users may do
//!   everything; with the authorizer on, no matching allow means denied (Kafka's default).
//!   With `security.authorizer_enabled = false` (the default) everything is allowed.
//! - Each core holds an `Arc<Authorizer>` of its own (`Shard::authorizer`), read on the data
//!   path without a lock; core 0 owns the ACLs file ([`file`]) and, after each change,
//!   installs the new set on every core by message before it answers (`AclMessage`).
//! - [`check`]: which operation on which resources each API needs, checked on the connection's
//!   core before a request is dispatched or forwarded.

pub mod check;
pub mod file;
pub mod store;

use borges_protocol::acl::{Acl, Operation, Permission, ResourceType, CLUSTER_NAME};

use crate::config::SecuritySettings;

/// The principal of a connection that neither authenticated with SASL nor presented a client
/// certificate (Kafka's).
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// One set of ACLs and the settings that decide with them. Immutable; shared by the cores as
/// an `Arc`, replaced whole on a change.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    enabled: bool,
    super_users: Vec<String>,
    acls: Vec<Acl>,
}

impl Authorizer {
    /// An authorizer with `settings` and `acls` (checked by the caller).
    pub fn new(settings: &SecuritySettings, acls: Vec<Acl>) -> Authorizer {
        Authorizer {
            enabled: settings.authorizer_enabled,
            super_users: settings.super_users.clone(),
            acls,
        }
    }

    /// The same settings with other ACLs.
    pub fn with_acls(&self, acls: Vec<Acl>) -> Authorizer {
        Authorizer {
            enabled: self.enabled,
            super_users: self.super_users.clone(),
            acls,
        }
    }

    /// Whether requests are checked at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The ACLs, in the order they were added.
    pub fn acls(&self) -> &[Acl] {
        &self.acls
    }

    /// Whether `principal` is a super user (allowed everything).
    pub fn is_super_user(&self, principal: &str) -> bool {
        self.super_users.iter().any(|s| s == principal)
    }

    /// Whether `principal` may do `operation` on the resource (`resource_type`, `name`):
    /// off, a super user, or an allow that grants it and no deny of it (or of All).
    pub fn authorize(
        &self,
        principal: &str,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if !self.enabled || self.is_super_user(principal) {
            return true;
        }
        let mut allowed = false;
        for acl in &self.acls {
            if !acl.applies_to(principal, resource_type, name) {
                continue;
            }
            match acl.permission {
                // Kafka: a deny of the operation itself, or of All, wins; a deny of Read
                // does not deny Describe.
                Permission::Deny if matches!(acl.operation, Operation::All) => return false,
                Permission::Deny if acl.operation == operation => return false,
                Permission::Deny => {}
                Permission::Allow => allowed |= acl.operation.grants(operation),
            }
        }
        allowed
    }

    /// Whether `principal` may do `operation` on the cluster.
    pub fn authorize_cluster(&self, principal: &str, operation: Operation) -> bool {
        self.authorize(principal, operation, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Whether `principal` may do `operation` on some resource of `resource_type` (Kafka's
    /// authorizeByResourceType, simplified): an allow that grants it and no deny of it on
    /// every name (the literal `*`).
    pub fn authorize_any(
        &self,
        principal: &str,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        if !self.enabled || self.is_super_user(principal) {
            return true;
        }
        let applies = |acl: &&Acl| {
            acl.resource_type == resource_type
                && (acl.principal == principal
                    || acl.principal == borges_protocol::acl::WILDCARD_PRINCIPAL)
        };
        let denied_everywhere = self.acls.iter().filter(applies).any(|acl| {
            acl.permission == Permission::Deny
                && (acl.operation == operation || acl.operation == Operation::All)
                && acl.pattern == borges_protocol::acl::PatternType::Literal
                && acl.resource_name == borges_protocol::acl::WILDCARD_NAME
        });
        !denied_everywhere
            && self
                .acls
                .iter()
                .filter(applies)
                .any(|acl| acl.permission == Permission::Allow && acl.operation.grants(operation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use borges_protocol::acl::PatternType;

    fn acl(
        principal: &str,
        operation: Operation,
        name: &str,
        pattern: PatternType,
        permission: Permission,
    ) -> Acl {
        Acl {
            principal: principal.into(),
            resource_type: ResourceType::Topic,
            resource_name: name.into(),
            pattern,
            operation,
            permission,
        }
    }

    fn on(acls: Vec<Acl>) -> Authorizer {
        let settings = SecuritySettings {
            authorizer_enabled: true,
            super_users: vec!["User:admin".into()],
            ..SecuritySettings::default()
        };
        Authorizer::new(&settings, acls)
    }

    const T: ResourceType = ResourceType::Topic;

    #[test]
    fn off_allows_everything_and_on_denies_without_an_acl() {
        let off = Authorizer::new(&SecuritySettings::default(), Vec::new());
        assert!(!off.enabled());
        assert!(off.authorize("User:bob", Operation::Write, T, "t"));
        let on = on(Vec::new());
        assert!(!on.authorize("User:bob", Operation::Write, T, "t"));
        assert!(!on.authorize(ANONYMOUS, Operation::Describe, T, "t"));
        assert!(!on.authorize_cluster("User:bob", Operation::Alter));
    }

    #[test]
    fn super_users_may_do_everything_even_when_denied() {
        use PatternType::Literal;
        let a = on(vec![acl(
            "User:admin",
            Operation::All,
            "*",
            Literal,
            Permission::Deny,
        )]);
        assert!(a.authorize("User:admin", Operation::Delete, T, "t"));
        assert!(a.authorize_cluster("User:admin", Operation::Alter));
        assert!(
            !a.authorize("User:Admin", Operation::Delete, T, "t"),
            "names are exact"
        );
    }

    #[test]
    fn deny_wins_over_allow() {
        use PatternType::*;
        let a = on(vec![
            acl(
                "User:alice",
                Operation::All,
                "orders",
                Prefixed,
                Permission::Allow,
            ),
            acl(
                "User:*",
                Operation::Write,
                "orders.secret",
                Literal,
                Permission::Deny,
            ),
        ]);
        assert!(a.authorize("User:alice", Operation::Write, T, "orders.eu"));
        assert!(!a.authorize("User:alice", Operation::Write, T, "orders.secret"));
        assert!(
            a.authorize("User:alice", Operation::Read, T, "orders.secret"),
            "a deny of Write does not deny Read"
        );
        let all = on(vec![
            acl(
                "User:alice",
                Operation::Read,
                "t",
                Literal,
                Permission::Allow,
            ),
            acl("User:alice", Operation::All, "*", Literal, Permission::Deny),
        ]);
        assert!(!all.authorize("User:alice", Operation::Read, T, "t"));
    }

    #[test]
    fn implied_operations_and_the_wildcard_principal() {
        use PatternType::Literal;
        let a = on(vec![
            acl("User:*", Operation::Read, "t", Literal, Permission::Allow),
            acl(
                "User:carol",
                Operation::AlterConfigs,
                "t",
                Literal,
                Permission::Allow,
            ),
        ]);
        assert!(a.authorize("User:anyone", Operation::Describe, T, "t"));
        assert!(!a.authorize("User:anyone", Operation::Write, T, "t"));
        assert!(a.authorize("User:carol", Operation::DescribeConfigs, T, "t"));
        assert!(!a.authorize("User:anyone", Operation::Read, ResourceType::Group, "t"));
    }

    #[test]
    fn any_resource_of_a_type() {
        use PatternType::*;
        let a = on(vec![acl(
            "User:p",
            Operation::Write,
            "logs.",
            Prefixed,
            Permission::Allow,
        )]);
        assert!(a.authorize_any("User:p", Operation::Write, T));
        assert!(!a.authorize_any("User:q", Operation::Write, T));
        let mut acls = a.acls().to_vec();
        acls.push(acl(
            "User:p",
            Operation::Write,
            "*",
            Literal,
            Permission::Deny,
        ));
        assert!(!a
            .with_acls(acls)
            .authorize_any("User:p", Operation::Write, T));
    }
}
