//! AlterUserScramCredentials and DescribeUserScramCredentials as plain logic over a set of
//! credentials (docs/protocol.md 4.22): the shard decides where the set lives (the metadata
//! log in a cluster, the credentials file on a single node) and installs the result.
//!
//! A user's alterations all apply or none does; users are answered in the order the request
//! first names them (its deletions, then its upsertions).

use borges_protocol::scram::{Credential, Mechanism};
use borges_protocol::ErrorCode;

use super::file::UserCredential;
use crate::failure::Failure;

/// One upsertion, as the request carries it (checked by [`alter`]).
#[derive(Debug, Clone)]
pub struct Upsertion {
    /// The username.
    pub name: String,
    /// The wire mechanism number (1 SCRAM-SHA-256, 2 SCRAM-SHA-512).
    pub mechanism: i8,
    /// PBKDF2 iterations.
    pub iterations: i32,
    /// The salt.
    pub salt: Vec<u8>,
    /// `Hi(password, salt, iterations)`, from which the keys are derived (never stored).
    pub salted_password: Vec<u8>,
}

/// One deletion, as the request carries it.
#[derive(Debug, Clone)]
pub struct Deletion {
    /// The username.
    pub name: String,
    /// The wire mechanism number.
    pub mechanism: i8,
}

/// An AlterUserScramCredentials request's alterations.
#[derive(Debug, Clone, Default)]
pub struct Alterations {
    /// Credentials to remove.
    pub deletions: Vec<Deletion>,
    /// Credentials to add or replace.
    pub upsertions: Vec<Upsertion>,
}

/// One user's outcome.
pub type UserResult = (String, Result<(), Failure>);

/// One described user: its mechanisms and iterations, or why not.
pub type Described = (String, Result<Vec<(Mechanism, u32)>, Failure>);

fn unacceptable(name: &str, why: impl std::fmt::Display) -> Failure {
    Failure::new(
        ErrorCode::UnacceptableCredential,
        format!("user {name:?}: {why}"),
    )
}

fn mechanism(name: &str, value: i8) -> Result<Mechanism, Failure> {
    Mechanism::from_wire_type(value).ok_or_else(|| {
        Failure::new(
            ErrorCode::UnsupportedSaslMechanism,
            format!("user {name:?}: unknown mechanism {value} (1 SCRAM-SHA-256, 2 SCRAM-SHA-512)"),
        )
    })
}

fn credential(u: &Upsertion) -> Result<Credential, Failure> {
    let m = mechanism(&u.name, u.mechanism)?;
    let iterations = u32::try_from(u.iterations)
        .map_err(|_| unacceptable(&u.name, format!("{} iterations", u.iterations)))?;
    Credential::from_salted_password(m, &u.salted_password, &u.salt, iterations)
        .map_err(|e| unacceptable(&u.name, e))
}

/// The users `a` names, each once, in the order of first mention.
fn users_in_order(a: &Alterations) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    let all = a.deletions.iter().map(|d| d.name.as_str());
    for name in all.chain(a.upsertions.iter().map(|u| u.name.as_str())) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

fn position(users: &[UserCredential], name: &str, m: Mechanism) -> Option<usize> {
    users
        .iter()
        .position(|u| u.name == name && u.credential.mechanism == m)
}

/// What an alteration may not do: exceed `credentials_max` credentials, or delete the
/// credential `protected` names (the inter-broker user's, by which the followers' replica
/// fetches authenticate: deleting it would stop replication).
#[derive(Debug, Clone, Copy)]
pub struct Bounds<'a> {
    /// Credentials at most.
    pub credentials_max: usize,
    /// A user and mechanism whose credential may be replaced but not deleted.
    pub protected: Option<(&'a str, Mechanism)>,
}

/// Applies `a` to `current` within `bounds`: the new set (in the old order, new credentials
/// at the end) and one result per user.
pub fn alter(
    current: &[UserCredential],
    a: &Alterations,
    bounds: Bounds<'_>,
) -> (Vec<UserCredential>, Vec<UserResult>) {
    let mut users = current.to_vec();
    let results = users_in_order(a)
        .into_iter()
        .map(|name| {
            let result = alter_user(&mut users, a, name, bounds);
            (name.to_string(), result)
        })
        .collect();
    (users, results)
}

/// Applies `name`'s alterations to `users`, all or none.
fn alter_user(
    users: &mut Vec<UserCredential>,
    a: &Alterations,
    name: &str,
    bounds: Bounds<'_>,
) -> Result<(), Failure> {
    let credentials_max = bounds.credentials_max;
    super::check_username(name).map_err(|why| unacceptable(name, why))?;
    let deleted: Vec<Mechanism> = a
        .deletions
        .iter()
        .filter(|d| d.name == name)
        .map(|d| mechanism(name, d.mechanism))
        .collect::<Result<_, _>>()?;
    let upserted: Vec<Credential> = a
        .upsertions
        .iter()
        .filter(|u| u.name == name)
        .map(credential)
        .collect::<Result<_, _>>()?;
    let mut named: Vec<Mechanism> = deleted.clone();
    named.extend(upserted.iter().map(|c| c.mechanism));
    if let Some(twice) = named
        .iter()
        .enumerate()
        .find(|(i, m)| named[..*i].contains(m))
    {
        return Err(Failure::new(
            ErrorCode::DuplicateResource,
            format!("user {name:?}: {} named twice in one request", twice.1),
        ));
    }
    check_deletions(users, name, &deleted, bounds)?;
    let added = upserted
        .iter()
        .filter(|c| position(users, name, c.mechanism).is_none())
        .count();
    let count = users.len() - deleted.len() + added;
    if count > credentials_max {
        return Err(Failure::new(
            ErrorCode::LimitExceeded,
            format!("user {name:?}: {count} SCRAM credentials; at most {credentials_max}"),
        ));
    }
    users.retain(|u| !(u.name == name && deleted.contains(&u.credential.mechanism)));
    for credential in upserted {
        let user = UserCredential {
            name: name.to_string(),
            credential,
        };
        super::file::upsert(users, user);
    }
    Ok(())
}

/// Refuses deleting the protected credential, or one `name` does not have.
fn check_deletions(
    users: &[UserCredential],
    name: &str,
    deleted: &[Mechanism],
    bounds: Bounds<'_>,
) -> Result<(), Failure> {
    if let Some((_, m)) = bounds
        .protected
        .filter(|(user, m)| *user == name && deleted.contains(m))
    {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!(
                "user {name:?} is the inter-broker user (sasl.inter_broker_username): deleting \
                 its {m} credential would stop the followers' replica fetches; its password \
                 may be changed, or another inter-broker user configured first"
            ),
        ));
    }
    if let Some(m) = deleted
        .iter()
        .find(|m| position(users, name, **m).is_none())
    {
        return Err(Failure::new(
            ErrorCode::ResourceNotFound,
            format!("user {name:?} has no {m} credential to delete"),
        ));
    }
    Ok(())
}

/// The mechanisms and iterations of the users named (every user, by name, when `names` is
/// empty), never a secret.
pub fn describe(current: &[UserCredential], names: &[String]) -> Vec<Described> {
    let infos = |name: &str| {
        let mut found: Vec<(Mechanism, u32)> = current
            .iter()
            .filter(|u| u.name == name)
            .map(|u| (u.credential.mechanism, u.credential.iterations))
            .collect();
        found.sort_by_key(|(m, _)| m.wire_type());
        found
    };
    if names.is_empty() {
        let mut all: Vec<&str> = current.iter().map(|u| u.name.as_str()).collect();
        all.sort_unstable();
        all.dedup();
        return all
            .into_iter()
            .map(|n| (n.to_string(), Ok(infos(n))))
            .collect();
    }
    let mut out: Vec<Described> = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            if let Some(first) = out.iter_mut().find(|(n, _)| n == name) {
                first.1 = Err(Failure::new(
                    ErrorCode::DuplicateResource,
                    format!("user {name:?} named twice in one request"),
                ));
            }
            continue;
        }
        let found = infos(name);
        let result = match found.is_empty() {
            true => Err(Failure::new(
                ErrorCode::ResourceNotFound,
                format!("user {name:?} has no SCRAM credential"),
            )),
            false => Ok(found),
        };
        out.push((name.clone(), result));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA256: i8 = 1;
    const SHA512: i8 = 2;

    fn upsertion(name: &str, mechanism: i8, iterations: i32, password: &str) -> Upsertion {
        let m = Mechanism::from_wire_type(mechanism).unwrap_or(Mechanism::ScramSha256);
        let salt = b"some salt".to_vec();
        let count = u32::try_from(iterations).unwrap_or(4096).clamp(1, 20_000);
        Upsertion {
            name: name.into(),
            mechanism,
            iterations,
            salted_password: m.salted_password(password.as_bytes(), &salt, count),
            salt,
        }
    }

    fn deletion(name: &str, mechanism: i8) -> Deletion {
        Deletion {
            name: name.into(),
            mechanism,
        }
    }

    fn bounded(credentials_max: usize) -> Bounds<'static> {
        Bounds {
            credentials_max,
            protected: None,
        }
    }

    /// The inter-broker user's credential of its mechanism may be replaced, not deleted; its
    /// other mechanisms and other users' may.
    #[test]
    fn the_inter_broker_users_credential_is_not_deleted() {
        let (start, _) = alter(
            &[],
            &Alterations {
                deletions: Vec::new(),
                upsertions: vec![
                    upsertion("broker", SHA256, 4096, "pw"),
                    upsertion("broker", SHA512, 4096, "pw"),
                ],
            },
            bounded(10),
        );
        let bounds = Bounds {
            credentials_max: 10,
            protected: Some(("broker", Mechanism::ScramSha256)),
        };
        let delete = |m| Alterations {
            deletions: vec![deletion("broker", m)],
            upsertions: Vec::new(),
        };
        let (users, results) = alter(&start, &delete(SHA256), bounds);
        assert_eq!(codes(&results), vec![("broker", ErrorCode::InvalidRequest)]);
        assert!(users == start, "nothing changed");
        let (users, results) = alter(&start, &delete(SHA512), bounds);
        assert_eq!(codes(&results), vec![("broker", ErrorCode::None)]);
        assert_eq!(users.len(), 1);
        let rotate = Alterations {
            deletions: Vec::new(),
            upsertions: vec![upsertion("broker", SHA256, 4096, "new")],
        };
        let (users, results) = alter(&users, &rotate, bounds);
        assert_eq!(codes(&results), vec![("broker", ErrorCode::None)]);
        assert!(users[0].credential != start[0].credential, "a new password");
    }

    fn codes(results: &[UserResult]) -> Vec<(&str, ErrorCode)> {
        let code = |r: &Result<(), Failure>| r.as_ref().err().map_or(ErrorCode::None, |f| f.code);
        results.iter().map(|(n, r)| (n.as_str(), code(r))).collect()
    }

    #[test]
    fn upsertions_derive_the_passwords_keys_and_replace_per_mechanism() {
        let a = Alterations {
            deletions: Vec::new(),
            upsertions: vec![
                upsertion("alice", SHA256, 4096, "pw"),
                upsertion("alice", SHA512, 8192, "pw"),
            ],
        };
        let (users, results) = alter(&[], &a, bounded(10));
        assert_eq!(codes(&results), vec![("alice", ErrorCode::None)]);
        assert_eq!(users.len(), 2);
        let expected = Credential::new(Mechanism::ScramSha256, b"pw", b"some salt", 4096);
        assert!(users[0].credential == expected, "the keys of the password");
        let again = Alterations {
            deletions: vec![deletion("alice", SHA512)],
            upsertions: vec![upsertion("alice", SHA256, 4096, "new")],
        };
        let (users, results) = alter(&users, &again, bounded(10));
        assert_eq!(codes(&results), vec![("alice", ErrorCode::None)]);
        assert_eq!(users.len(), 1);
        assert!(users[0].credential != expected, "a new password");
    }

    #[test]
    fn a_refused_user_changes_nothing_and_the_others_apply() {
        let (start, _) = alter(
            &[],
            &Alterations {
                deletions: Vec::new(),
                upsertions: vec![upsertion("keep", SHA256, 4096, "pw")],
            },
            bounded(10),
        );
        let a = Alterations {
            deletions: vec![deletion("ghost", SHA256), deletion("keep", SHA256)],
            upsertions: vec![
                upsertion("low", SHA256, 4095, "pw"),
                upsertion("high", SHA256, 16385, "pw"),
                upsertion("", SHA256, 4096, "pw"),
                upsertion("twice", SHA256, 4096, "a"),
                upsertion("twice", SHA256, 4096, "b"),
                upsertion("keep", SHA256, 4096, "again"),
                upsertion("odd", 7, 4096, "pw"),
                upsertion("fine", SHA512, 4096, "pw"),
            ],
        };
        let (users, results) = alter(&start, &a, bounded(10));
        assert_eq!(
            codes(&results),
            vec![
                ("ghost", ErrorCode::ResourceNotFound),
                ("keep", ErrorCode::DuplicateResource),
                ("low", ErrorCode::UnacceptableCredential),
                ("high", ErrorCode::UnacceptableCredential),
                ("", ErrorCode::UnacceptableCredential),
                ("twice", ErrorCode::DuplicateResource),
                ("odd", ErrorCode::UnsupportedSaslMechanism),
                ("fine", ErrorCode::None),
            ]
        );
        assert_eq!(users[..1], start[..], "keep is unchanged");
        let names: Vec<&str> = users.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(names, vec!["keep", "fine"]);
    }

    #[test]
    fn the_limit_refuses_the_user_over_it() {
        let a = Alterations {
            deletions: Vec::new(),
            upsertions: vec![
                upsertion("a", SHA256, 4096, "pw"),
                upsertion("b", SHA256, 4096, "pw"),
            ],
        };
        let (users, results) = alter(&[], &a, bounded(1));
        assert_eq!(
            codes(&results),
            vec![("a", ErrorCode::None), ("b", ErrorCode::LimitExceeded)]
        );
        assert_eq!(users.len(), 1);
    }

    #[test]
    fn describe_lists_mechanisms_only_and_names_unknown_and_repeated_users() {
        let a = Alterations {
            deletions: Vec::new(),
            upsertions: vec![
                upsertion("bob", SHA512, 8192, "pw"),
                upsertion("bob", SHA256, 4096, "pw"),
                upsertion("alice", SHA256, 4096, "pw"),
            ],
        };
        let (users, _) = alter(&[], &a, bounded(10));
        let all = describe(&users, &[]);
        let names: Vec<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, vec!["alice", "bob"]);
        let bob = all[1].1.as_ref().unwrap();
        assert_eq!(
            bob,
            &vec![
                (Mechanism::ScramSha256, 4096),
                (Mechanism::ScramSha512, 8192)
            ]
        );
        let named = describe(&users, &["bob".into(), "nobody".into(), "bob".into()]);
        let code = |r: &Result<_, Failure>| r.as_ref().err().map(|f| f.code);
        assert_eq!(named.len(), 2);
        assert_eq!(code(&named[0].1), Some(ErrorCode::DuplicateResource));
        assert_eq!(code(&named[1].1), Some(ErrorCode::ResourceNotFound));
    }
}
