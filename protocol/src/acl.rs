//! Access control lists in Kafka's model (issue 20; docs/operations.md "ACLs"): the values an
//! ACL is made of, their wire numbers (Kafka's), and how an ACL or a filter matches.
//!
//! An [`Acl`] says that a principal (`User:alice`, or `User:*` for every principal) is allowed
//! or denied an [`Operation`] on resources of one [`ResourceType`] whose names match a
//! pattern: [`PatternType::Literal`] (the name itself; `*` is every name) or
//! [`PatternType::Prefixed`] (every name starting with it). The decision (deny wins, super
//! users, implied operations) is the broker's authorizer; this module is shared with the SDK
//! and the CLI. Hosts are not part of Borges' ACLs (Kafka's `host` is always `*`).

use std::fmt;

use flatbuffers::WIPOffset;

use crate::wire;

/// The only name of the cluster resource (Kafka's).
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// The principal that matches every principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// The literal resource name that matches every name.
pub const WILDCARD_NAME: &str = "*";

/// Longest principal, in bytes (`User:` and the name or certificate subject).
pub const PRINCIPAL_SIZE_BYTES_MAX: usize = 1024;

/// Longest resource name or prefix, in bytes.
pub const RESOURCE_NAME_SIZE_BYTES_MAX: usize = 1024;

/// Most ACLs one CreateAcls request may carry.
pub const CREATIONS_PER_REQUEST_MAX: usize = 1000;

/// Most filters one DeleteAcls request may carry.
pub const FILTERS_PER_REQUEST_MAX: usize = 100;

macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $( $(#[$vdoc:meta])* $variant:ident = $code:literal, )* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vdoc])* $variant, )*
        }

        impl $name {
            /// Every value, in wire order.
            pub const ALL: &'static [$name] = &[ $( $name::$variant, )* ];

            /// The wire number (Kafka's).
            pub fn code(self) -> i8 {
                match self { $( $name::$variant => $code, )* }
            }

            /// From a wire number; `None` for unknown numbers.
            pub fn from_code(code: i8) -> Option<$name> {
                match code { $( $code => Some($name::$variant), )* _ => None }
            }

            /// The name, as kafka-acls.sh prints it.
            pub fn name(self) -> &'static str {
                match self { $( $name::$variant => stringify!($variant), )* }
            }

            /// From a name, ignoring case and `-`/`_` (`describe-configs`, `DescribeConfigs`).
            pub fn from_name(text: &str) -> Option<$name> {
                let wanted: String = text
                    .chars()
                    .filter(|c| *c != '-' && *c != '_')
                    .collect::<String>()
                    .to_ascii_lowercase();
                $name::ALL
                    .iter()
                    .copied()
                    .find(|v| v.name().to_ascii_lowercase() == wanted)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

wire_enum! {
    /// What kind of resource an ACL protects. Wire 1 is Kafka's `Any` (filters only).
    ResourceType {
        /// A topic, by name.
        Topic = 2,
        /// A consumer group, by id.
        Group = 3,
        /// The cluster (one resource, named [`CLUSTER_NAME`]).
        Cluster = 4,
    }
}

wire_enum! {
    /// How an ACL's resource name matches names. Wire 1 is Kafka's `Any` (filters only).
    PatternType {
        /// The name itself; `*` matches every name.
        Literal = 3,
        /// Every name that starts with it.
        Prefixed = 4,
    }
}

wire_enum! {
    /// What a request does to a resource. Wire 1 is Kafka's `Any` (filters only).
    Operation {
        /// Every operation.
        All = 2,
        /// Fetch, consume, commit offsets.
        Read = 3,
        /// Produce.
        Write = 4,
        /// Create topics.
        Create = 5,
        /// Delete topics or groups.
        Delete = 6,
        /// Add partitions; on the cluster, manage ACLs.
        Alter = 7,
        /// Metadata, offsets, group descriptions; implied by Read, Write, Delete and Alter.
        Describe = 8,
        /// Between brokers: replica fetches.
        ClusterAction = 9,
        /// Read configs; implied by AlterConfigs.
        DescribeConfigs = 10,
        /// Change configs.
        AlterConfigs = 11,
        /// Idempotent producers (InitProducerId) on the cluster.
        IdempotentWrite = 12,
    }
}

wire_enum! {
    /// Whether an ACL allows or denies. Wire 1 is Kafka's `Any` (filters only).
    Permission {
        /// Denies; a matching deny beats every allow.
        Deny = 2,
        /// Allows.
        Allow = 3,
    }
}

/// The wire number of "any value" in a filter (Kafka's `ANY`).
pub const ANY_CODE: i8 = 1;

impl Operation {
    /// Whether an ACL on `self` grants `wanted` (Kafka's implications: All grants everything;
    /// Read, Write, Delete and Alter grant Describe; AlterConfigs grants DescribeConfigs).
    pub fn grants(self, wanted: Operation) -> bool {
        use Operation::*;
        match (self, wanted) {
            (All, _) => true,
            (a, b) if a == b => true,
            (Read | Write | Delete | Alter, Describe) => true,
            (AlterConfigs, DescribeConfigs) => true,
            _ => false,
        }
    }
}

/// One ACL: `principal` is `permission`ed `operation` on resources of `resource_type` whose
/// names match `resource_name` by `pattern`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Acl {
    /// `User:NAME` or [`WILDCARD_PRINCIPAL`].
    pub principal: String,
    /// What kind of resource.
    pub resource_type: ResourceType,
    /// The name, prefix or `*`.
    pub resource_name: String,
    /// How the name matches.
    pub pattern: PatternType,
    /// The operation.
    pub operation: Operation,
    /// Allow or deny.
    pub permission: Permission,
}

/// Why an ACL or filter is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AclError(pub String);

/// Checks a principal: `User:` and 1.. bytes, at most [`PRINCIPAL_SIZE_BYTES_MAX`] in all, no
/// control characters.
pub fn check_principal(principal: &str) -> Result<(), AclError> {
    let name = principal.strip_prefix("User:").unwrap_or("");
    if name.is_empty() {
        return Err(AclError(format!(
            "principal {principal:?}: a principal is User:NAME (or User:*)"
        )));
    }
    if principal.len() > PRINCIPAL_SIZE_BYTES_MAX || principal.chars().any(char::is_control) {
        return Err(AclError(format!(
            "principal: at most {PRINCIPAL_SIZE_BYTES_MAX} bytes, no control characters"
        )));
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), AclError> {
    if name.is_empty() || name.len() > RESOURCE_NAME_SIZE_BYTES_MAX {
        return Err(AclError(format!(
            "a resource name has 1..={RESOURCE_NAME_SIZE_BYTES_MAX} bytes"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(AclError("a resource name has no control characters".into()));
    }
    Ok(())
}

impl Acl {
    /// Checks the ACL's fields: the principal, the name (the cluster's is [`CLUSTER_NAME`],
    /// literal), and no prefixed `*`.
    pub fn validate(&self) -> Result<(), AclError> {
        check_principal(&self.principal)?;
        check_name(&self.resource_name)?;
        if self.resource_type == ResourceType::Cluster
            && (self.resource_name != CLUSTER_NAME || self.pattern != PatternType::Literal)
        {
            return Err(AclError(format!(
                "the cluster resource is the literal name {CLUSTER_NAME:?}"
            )));
        }
        if self.pattern == PatternType::Prefixed && self.resource_name == WILDCARD_NAME {
            return Err(AclError(
                "a prefixed pattern of \"*\" is not allowed: use the literal \"*\"".into(),
            ));
        }
        Ok(())
    }

    /// Whether this ACL applies to `principal` doing something to the resource
    /// (`resource_type`, `name`), whatever the operation.
    pub fn applies_to(&self, principal: &str, resource_type: ResourceType, name: &str) -> bool {
        let principal_matches = self.principal == principal || self.principal == WILDCARD_PRINCIPAL;
        principal_matches && self.resource_type == resource_type && self.name_matches(name)
    }

    /// Whether the ACL's pattern matches resource name `name`.
    pub fn name_matches(&self, name: &str) -> bool {
        match self.pattern {
            PatternType::Literal => self.resource_name == name || self.resource_name == "*",
            PatternType::Prefixed => name.starts_with(self.resource_name.as_str()),
        }
    }
}

impl fmt::Display for Acl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(principal={}, host=*, operation={}, permissionType={}) on \
             ResourcePattern(resourceType={}, name={}, patternType={})",
            self.principal,
            self.operation.name().to_ascii_uppercase(),
            self.permission.name().to_ascii_uppercase(),
            self.resource_type.name().to_ascii_uppercase(),
            self.resource_name,
            self.pattern.name().to_ascii_uppercase(),
        )
    }
}

/// Which ACLs DescribeAcls lists or DeleteAcls removes: every field left `None` matches any
/// value; a given field must be equal (no pattern matching: a filter names ACLs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclFilter {
    /// The principal.
    pub principal: Option<String>,
    /// The resource type.
    pub resource_type: Option<ResourceType>,
    /// The resource name (or prefix).
    pub resource_name: Option<String>,
    /// The pattern type.
    pub pattern: Option<PatternType>,
    /// The operation.
    pub operation: Option<Operation>,
    /// The permission.
    pub permission: Option<Permission>,
}

impl AclFilter {
    /// Whether `acl` is one this filter names.
    pub fn matches(&self, acl: &Acl) -> bool {
        fn eq<T: PartialEq>(want: &Option<T>, have: &T) -> bool {
            want.as_ref().is_none_or(|w| w == have)
        }
        eq(&self.principal, &acl.principal)
            && eq(&self.resource_type, &acl.resource_type)
            && eq(&self.resource_name, &acl.resource_name)
            && eq(&self.pattern, &acl.pattern)
            && eq(&self.operation, &acl.operation)
            && eq(&self.permission, &acl.permission)
    }

    /// Whether the filter names every ACL (DeleteAcls refuses it: delete by naming).
    pub fn is_empty(&self) -> bool {
        *self == AclFilter::default()
    }
}

/// Decodes a filter field: [`ANY_CODE`] is `None`, else a known value.
pub fn filter_field<T>(
    code: i8,
    decode: fn(i8) -> Option<T>,
    what: &str,
) -> Result<Option<T>, AclError> {
    if code == ANY_CODE {
        return Ok(None);
    }
    decode(code)
        .map(Some)
        .ok_or_else(|| AclError(format!("unknown {what} {code}")))
}

type Builder<'b> = flatbuffers::FlatBufferBuilder<'b>;

/// Encodes an ACL as the wire's `AclBinding`.
pub fn encode_acl<'b>(fbb: &mut Builder<'b>, acl: &Acl) -> WIPOffset<wire::AclBinding<'b>> {
    let principal = fbb.create_string(&acl.principal);
    let resource_name = fbb.create_string(&acl.resource_name);
    wire::AclBinding::create(
        fbb,
        &wire::AclBindingArgs {
            principal: Some(principal),
            resource_type: acl.resource_type.code(),
            resource_name: Some(resource_name),
            pattern_type: acl.pattern.code(),
            operation: acl.operation.code(),
            permission: acl.permission.code(),
        },
    )
}

/// Decodes and validates a wire `AclBinding`.
pub fn decode_acl(b: &wire::AclBinding<'_>) -> Result<Acl, AclError> {
    fn known<T>(code: i8, decode: fn(i8) -> Option<T>, what: &str) -> Result<T, AclError> {
        decode(code).ok_or_else(|| AclError(format!("unknown {what} {code}")))
    }
    let acl = Acl {
        principal: b.principal().to_string(),
        resource_type: known(b.resource_type(), ResourceType::from_code, "resource type")?,
        resource_name: b.resource_name().to_string(),
        pattern: known(b.pattern_type(), PatternType::from_code, "pattern type")?,
        operation: known(b.operation(), Operation::from_code, "operation")?,
        permission: known(b.permission(), Permission::from_code, "permission")?,
    };
    acl.validate()?;
    Ok(acl)
}

/// Encodes a filter as the wire's `AclFilter` (`None` fields as "any").
pub fn encode_filter<'b>(fbb: &mut Builder<'b>, f: &AclFilter) -> WIPOffset<wire::AclFilter<'b>> {
    let principal = f.principal.as_deref().map(|p| fbb.create_string(p));
    let resource_name = f.resource_name.as_deref().map(|n| fbb.create_string(n));
    wire::AclFilter::create(
        fbb,
        &wire::AclFilterArgs {
            principal,
            resource_type: f.resource_type.map_or(ANY_CODE, ResourceType::code),
            resource_name,
            pattern_type: f.pattern.map_or(ANY_CODE, PatternType::code),
            operation: f.operation.map_or(ANY_CODE, Operation::code),
            permission: f.permission.map_or(ANY_CODE, Permission::code),
        },
    )
}

/// Decodes a wire `AclFilter`.
pub fn decode_filter(f: &wire::AclFilter<'_>) -> Result<AclFilter, AclError> {
    Ok(AclFilter {
        principal: f.principal().map(str::to_string),
        resource_type: filter_field(f.resource_type(), ResourceType::from_code, "resource type")?,
        resource_name: f.resource_name().map(str::to_string),
        pattern: filter_field(f.pattern_type(), PatternType::from_code, "pattern type")?,
        operation: filter_field(f.operation(), Operation::from_code, "operation")?,
        permission: filter_field(f.permission(), Permission::from_code, "permission")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(principal: &str, rt: ResourceType, name: &str, pattern: PatternType) -> Acl {
        Acl {
            principal: principal.into(),
            resource_type: rt,
            resource_name: name.into(),
            pattern,
            operation: Operation::Read,
            permission: Permission::Allow,
        }
    }

    #[test]
    fn names_and_codes_round_trip() {
        for &o in Operation::ALL {
            assert_eq!(Operation::from_code(o.code()), Some(o));
            assert_eq!(Operation::from_name(o.name()), Some(o));
        }
        assert_eq!(
            Operation::from_name("describe-configs"),
            Some(Operation::DescribeConfigs)
        );
        assert_eq!(ResourceType::from_name("TOPIC"), Some(ResourceType::Topic));
        assert_eq!(Operation::from_code(ANY_CODE), None);
        assert_eq!(Permission::from_name("maybe"), None);
    }

    #[test]
    fn implications_are_kafkas() {
        use Operation::*;
        for o in [Read, Write, Delete, Alter, Describe, All] {
            assert!(o.grants(Describe), "{o}");
        }
        for o in [
            Create,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
        ] {
            assert!(!o.grants(Describe), "{o}");
        }
        assert!(AlterConfigs.grants(DescribeConfigs));
        assert!(!DescribeConfigs.grants(AlterConfigs));
        assert!(!Describe.grants(Read));
        assert!(!Write.grants(Read));
    }

    #[test]
    fn patterns_match_literal_wildcard_and_prefix() {
        let t = ResourceType::Topic;
        let literal = acl("User:alice", t, "orders", PatternType::Literal);
        assert!(literal.applies_to("User:alice", t, "orders"));
        assert!(!literal.applies_to("User:alice", t, "orders2"));
        assert!(!literal.applies_to("User:bob", t, "orders"));
        assert!(!literal.applies_to("User:alice", ResourceType::Group, "orders"));
        let every = acl("User:*", t, "*", PatternType::Literal);
        assert!(every.applies_to("User:bob", t, "anything"));
        let prefix = acl("User:alice", t, "orders.", PatternType::Prefixed);
        assert!(prefix.applies_to("User:alice", t, "orders.eu"));
        assert!(!prefix.applies_to("User:alice", t, "orders"));
        let star_prefix = acl("User:alice", t, "*", PatternType::Prefixed);
        assert!(star_prefix.validate().is_err());
        assert!(
            !star_prefix.applies_to("User:alice", t, "orders"),
            "no glob in a prefix"
        );
    }

    #[test]
    fn invalid_acls_are_refused() {
        let t = ResourceType::Topic;
        assert!(acl("alice", t, "x", PatternType::Literal)
            .validate()
            .is_err());
        assert!(acl("User:", t, "x", PatternType::Literal)
            .validate()
            .is_err());
        assert!(acl("User:a", t, "", PatternType::Literal)
            .validate()
            .is_err());
        let long = "x".repeat(RESOURCE_NAME_SIZE_BYTES_MAX + 1);
        assert!(acl("User:a", t, &long, PatternType::Literal)
            .validate()
            .is_err());
        let c = ResourceType::Cluster;
        assert!(acl("User:a", c, "other", PatternType::Literal)
            .validate()
            .is_err());
        assert!(acl("User:a", c, CLUSTER_NAME, PatternType::Prefixed)
            .validate()
            .is_err());
        assert!(acl("User:a", c, CLUSTER_NAME, PatternType::Literal)
            .validate()
            .is_ok());
    }

    #[test]
    fn acls_and_filters_round_trip_the_wire() {
        let a = Acl {
            operation: Operation::IdempotentWrite,
            permission: Permission::Deny,
            ..acl(
                "User:CN=x,O=y",
                ResourceType::Group,
                "g.",
                PatternType::Prefixed,
            )
        };
        let mut fbb = flatbuffers::FlatBufferBuilder::new();
        let b = encode_acl(&mut fbb, &a);
        fbb.finish(b, None);
        let read = flatbuffers::root::<wire::AclBinding>(fbb.finished_data()).unwrap();
        assert_eq!(decode_acl(&read).unwrap(), a);
        let f = AclFilter {
            principal: Some("User:a".into()),
            operation: Some(Operation::Read),
            ..AclFilter::default()
        };
        let mut fbb = flatbuffers::FlatBufferBuilder::new();
        let b = encode_filter(&mut fbb, &f);
        fbb.finish(b, None);
        let read = flatbuffers::root::<wire::AclFilter>(fbb.finished_data()).unwrap();
        assert_eq!(decode_filter(&read).unwrap(), f);
        let mut fbb = flatbuffers::FlatBufferBuilder::new();
        let principal = fbb.create_string("User:a");
        let resource_name = fbb.create_string("t");
        let b = wire::AclBinding::create(
            &mut fbb,
            &wire::AclBindingArgs {
                principal: Some(principal),
                resource_name: Some(resource_name),
                resource_type: 2,
                operation: 1,
                ..Default::default()
            },
        );
        fbb.finish(b, None);
        let read = flatbuffers::root::<wire::AclBinding>(fbb.finished_data()).unwrap();
        assert!(
            decode_acl(&read).is_err(),
            "\"any\" is no operation of an ACL"
        );
    }

    #[test]
    fn filters_name_acls_by_equal_fields() {
        let a = acl(
            "User:alice",
            ResourceType::Topic,
            "t",
            PatternType::Prefixed,
        );
        assert!(AclFilter::default().matches(&a));
        let by_principal = AclFilter {
            principal: Some("User:alice".into()),
            ..AclFilter::default()
        };
        assert!(by_principal.matches(&a));
        let literal = AclFilter {
            pattern: Some(PatternType::Literal),
            ..by_principal.clone()
        };
        assert!(!literal.matches(&a));
        assert_eq!(
            filter_field(ANY_CODE, Operation::from_code, "operation"),
            Ok(None)
        );
        assert!(filter_field(99, Operation::from_code, "operation").is_err());
    }
}
