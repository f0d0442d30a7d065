//! `borges acl add|remove|list`, in the style of kafka-acls.sh (docs/cli.md, "ACLs"): the
//! broker's CreateAcls, DeleteAcls and DescribeAcls.

use std::collections::BTreeMap;
use std::io::Write;

use borges_client::acl::{
    Acl, AclFilter, Operation, PatternType, Permission, ResourceType, CLUSTER_NAME,
};
use borges_client::{Admin, ClientConfig};
use clap::{Args, Subcommand};

use crate::commands::usage;

const EXAMPLES: &str = "Examples:
  borges acl add --allow-principal User:alice --operation Read --topic orders
  borges acl add --allow-principal User:alice --operation Write --topic orders. \\
      --resource-pattern-type prefixed
  borges acl add --deny-principal User:bob --operation All --topic orders.secret
  borges acl add --allow-principal User:svc --operation Read --group svc-
  borges acl add --allow-principal User:ops --operation Alter --cluster
  borges acl list --topic orders
  borges acl remove --allow-principal User:alice --operation Read --topic orders

Operations: All, Read, Write, Create, Delete, Alter, Describe, ClusterAction,
DescribeConfigs, AlterConfigs, IdempotentWrite (case and '-' ignored).";

/// The resources a command is about.
#[derive(Debug, Clone, Args)]
pub struct Resources {
    /// A topic (name, prefix or `*`); repeatable.
    #[arg(long, value_name = "TOPIC")]
    pub topic: Vec<String>,
    /// A consumer group (id, prefix or `*`); repeatable.
    #[arg(long, value_name = "GROUP")]
    pub group: Vec<String>,
    /// The cluster.
    #[arg(long)]
    pub cluster: bool,
    /// literal (the name; `*` is every name) or prefixed (names starting with it); `list`
    /// and `remove` also take any.
    #[arg(long, value_name = "TYPE")]
    pub resource_pattern_type: Option<String>,
}

/// The principals and operations of `add` and `remove`.
#[derive(Debug, Clone, Args)]
pub struct Grants {
    /// A principal to allow (`User:NAME`, `User:*`); repeatable.
    #[arg(long, value_name = "PRINCIPAL")]
    pub allow_principal: Vec<String>,
    /// A principal to deny; repeatable. A deny beats every allow.
    #[arg(long, value_name = "PRINCIPAL")]
    pub deny_principal: Vec<String>,
    /// An operation; repeatable.
    #[arg(long, value_name = "OPERATION", required = true)]
    pub operation: Vec<String>,
}

/// `borges acl ...`
#[derive(Debug, Subcommand)]
pub enum AclCommand {
    /// Add ACLs (needs Alter on the cluster).
    #[command(after_help = EXAMPLES)]
    Add {
        #[command(flatten)]
        grants: Grants,
        #[command(flatten)]
        resources: Resources,
    },
    /// Remove the ACLs named (needs Alter on the cluster).
    #[command(after_help = EXAMPLES)]
    Remove {
        #[command(flatten)]
        grants: Grants,
        #[command(flatten)]
        resources: Resources,
    },
    /// List ACLs, by resource (needs Describe on the cluster).
    #[command(after_help = EXAMPLES)]
    List {
        /// Only this principal's.
        #[arg(long, value_name = "PRINCIPAL")]
        principal: Option<String>,
        #[command(flatten)]
        resources: Resources,
    },
}

fn parse<T>(what: &str, text: &str, from: fn(&str) -> Option<T>) -> anyhow::Result<T> {
    match from(text) {
        Some(v) => Ok(v),
        None => usage!("unknown {what} {text:?} (see --help)"),
    }
}

/// The (type, name) pairs named; `None` pattern: any (list and remove only).
fn resources(r: &Resources, any_allowed: bool) -> anyhow::Result<Vec<(ResourceType, String)>> {
    let mut out: Vec<(ResourceType, String)> = Vec::new();
    out.extend(r.topic.iter().map(|t| (ResourceType::Topic, t.clone())));
    out.extend(r.group.iter().map(|g| (ResourceType::Group, g.clone())));
    if r.cluster {
        out.push((ResourceType::Cluster, CLUSTER_NAME.to_string()));
    }
    if out.is_empty() && !any_allowed {
        usage!("name a resource: --topic, --group or --cluster");
    }
    Ok(out)
}

fn pattern(r: &Resources, any_allowed: bool) -> anyhow::Result<Option<PatternType>> {
    match r.resource_pattern_type.as_deref() {
        None if any_allowed => Ok(None),
        None => Ok(Some(PatternType::Literal)),
        Some(t) if any_allowed && t.eq_ignore_ascii_case("any") => Ok(None),
        Some(t) => parse("pattern type", t, PatternType::from_name).map(Some),
    }
}

/// Every ACL `add` names: each principal × operation × resource.
fn named_acls(grants: &Grants, r: &Resources) -> anyhow::Result<Vec<Acl>> {
    let pattern = pattern(r, false)?.unwrap_or(PatternType::Literal);
    let resources = resources(r, false)?;
    let mut principals: Vec<(Permission, &String)> = Vec::new();
    principals.extend(
        grants
            .allow_principal
            .iter()
            .map(|p| (Permission::Allow, p)),
    );
    principals.extend(grants.deny_principal.iter().map(|p| (Permission::Deny, p)));
    if principals.is_empty() {
        usage!("name a principal: --allow-principal or --deny-principal");
    }
    let mut acls = Vec::new();
    for (permission, principal) in principals {
        for op in &grants.operation {
            let operation = parse("operation", op, Operation::from_name)?;
            for (resource_type, name) in &resources {
                let cluster = *resource_type == ResourceType::Cluster;
                let acl = Acl {
                    principal: principal.clone(),
                    resource_type: *resource_type,
                    resource_name: name.clone(),
                    pattern: if cluster {
                        PatternType::Literal
                    } else {
                        pattern
                    },
                    operation,
                    permission,
                };
                if let Err(e) = acl.validate() {
                    usage!("{e}");
                }
                acls.push(acl);
            }
        }
    }
    Ok(acls)
}

/// Runs `borges acl ...`.
pub async fn run(config: ClientConfig, command: AclCommand) -> anyhow::Result<()> {
    let admin = Admin::new(config).await?;
    let mut out = std::io::stdout().lock();
    match command {
        AclCommand::Add { grants, resources } => {
            let acls = named_acls(&grants, &resources)?;
            let results = admin.create_acls(&acls).await?;
            for (acl, result) in acls.iter().zip(results) {
                result.map_err(|e| anyhow::anyhow!("adding {acl}: {e}"))?;
            }
            writeln!(out, "Adding ACLs:")?;
            print_by_resource(&mut out, &acls)?;
        }
        AclCommand::Remove { grants, resources } => {
            let filters: Vec<AclFilter> =
                named_acls(&grants, &resources)?.iter().map(exact).collect();
            let mut removed = Vec::new();
            for result in admin.delete_acls(&filters).await? {
                removed.extend(result?);
            }
            writeln!(out, "Removed {} ACLs:", removed.len())?;
            print_by_resource(&mut out, &removed)?;
        }
        AclCommand::List {
            principal,
            resources,
        } => list(&admin, &mut out, principal, &resources).await?,
    }
    Ok(())
}

async fn list(
    admin: &Admin,
    out: &mut impl Write,
    principal: Option<String>,
    r: &Resources,
) -> anyhow::Result<()> {
    let pattern = pattern(r, true)?;
    let named = resources(r, true)?;
    let mut filters: Vec<AclFilter> = named
        .into_iter()
        .map(|(resource_type, name)| AclFilter {
            principal: principal.clone(),
            resource_type: Some(resource_type),
            resource_name: Some(name),
            pattern,
            ..AclFilter::default()
        })
        .collect();
    if filters.is_empty() {
        filters.push(AclFilter {
            principal,
            pattern,
            ..AclFilter::default()
        });
    }
    let mut listed = Vec::new();
    for f in &filters {
        listed.extend(admin.describe_acls(f).await?);
    }
    print_by_resource(out, &listed)
}

fn exact(acl: &Acl) -> AclFilter {
    AclFilter {
        principal: Some(acl.principal.clone()),
        resource_type: Some(acl.resource_type),
        resource_name: Some(acl.resource_name.clone()),
        pattern: Some(acl.pattern),
        operation: Some(acl.operation),
        permission: Some(acl.permission),
    }
}

/// Prints ACLs grouped by resource, as kafka-acls.sh does.
fn print_by_resource(out: &mut impl Write, acls: &[Acl]) -> anyhow::Result<()> {
    let mut by: BTreeMap<(ResourceType, String, PatternType), Vec<&Acl>> = BTreeMap::new();
    for a in acls {
        let key = (a.resource_type, a.resource_name.clone(), a.pattern);
        by.entry(key).or_default().push(a);
    }
    for ((resource_type, name, pattern), acls) in by {
        writeln!(
            out,
            "Current ACLs for resource `ResourcePattern(resourceType={}, name={name}, \
             patternType={})`:",
            resource_type.name().to_ascii_uppercase(),
            pattern.name().to_ascii_uppercase()
        )?;
        for a in acls {
            writeln!(
                out,
                " \t(principal={}, host=*, operation={}, permissionType={})",
                a.principal,
                kafka_name(a.operation.name()),
                a.permission.name().to_ascii_uppercase()
            )?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// Kafka's upper-snake spelling: `DescribeConfigs` -> `DESCRIBE_CONFIGS`.
fn kafka_name(name: &str) -> String {
    let mut s = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            s.push('_');
        }
        s.push(c.to_ascii_uppercase());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(topic: &[&str], cluster: bool, pattern: Option<&str>) -> Resources {
        Resources {
            topic: topic.iter().map(|t| t.to_string()).collect(),
            group: Vec::new(),
            cluster,
            resource_pattern_type: pattern.map(str::to_string),
        }
    }

    #[test]
    fn add_names_each_principal_operation_and_resource() {
        let grants = Grants {
            allow_principal: vec!["User:a".into()],
            deny_principal: vec!["User:b".into()],
            operation: vec!["read".into(), "describe-configs".into()],
        };
        let acls = named_acls(&grants, &r(&["t."], true, Some("prefixed"))).unwrap();
        assert_eq!(acls.len(), 8);
        assert!(
            acls.iter()
                .all(|a| a.resource_type != ResourceType::Cluster
                    || a.pattern == PatternType::Literal)
        );
        assert_eq!(acls[0].pattern, PatternType::Prefixed);
        assert!(
            named_acls(&grants, &r(&[], false, None)).is_err(),
            "no resource"
        );
        let bad = Grants {
            operation: vec!["sing".into()],
            ..grants
        };
        assert!(named_acls(&bad, &r(&["t"], false, None)).is_err());
        assert_eq!(kafka_name("DescribeConfigs"), "DESCRIBE_CONFIGS");
    }
}
