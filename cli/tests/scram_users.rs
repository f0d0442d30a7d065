//! SCRAM users through the brokers (issue 20 item 2). In a cluster they live in the metadata
//! log: a user created through one broker (`borges user create --bootstrap`, the CLI's
//! AlterUserScramCredentials) authenticates on every broker, a deleted one is refused
//! everywhere, the credentials survive a restart of every broker and are in no broker's file,
//! DescribeUserScramCredentials shows mechanisms and iterations only, refused alterations
//! change nothing, and with the authorizer on a principal without Alter on the cluster is
//! refused. The brokers' credentials file (alice, broker, admin) is the bootstrap set: the
//! first change carries it over, so the inter-broker user keeps replicating. A single node
//! answers the same requests from its credentials file.

mod replicated;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use borges_client::{
    Admin, ClientError, ErrorCode, SaslConfig, ScramDeletion, ScramMechanism, ScramUpsertion,
};
use borges_testkit::cluster::{wait_until, Cluster};
use borges_testkit::users::create_file_user;
use borges_testkit::{BrokerOptions, BrokerProcess};
use replicated::{acks_all, check_acked, runtime, values};

const SHA256: ScramMechanism = ScramMechanism::ScramSha256;

/// Three brokers requiring SCRAM-SHA-256, the authorizer on (super users: broker, admin), one
/// credentials file for all (alice, broker, admin).
fn cluster(dir: &Path) -> Cluster {
    let credentials = dir.join("credentials.toml");
    for user in ["alice", "broker", "admin"] {
        create_file_user(&credentials, user, &format!("{user}-secret"));
    }
    let password_file = dir.join("broker.pw");
    std::fs::write(&password_file, "broker-secret\n").unwrap();
    let toml = format!(
        "heartbeat_interval_ms = 200\nsession_timeout_ms = 3000\n\n[sasl]\n\
         mechanisms = [\"SCRAM-SHA-256\"]\ncredentials_file = {:?}\n\
         inter_broker_username = \"broker\"\ninter_broker_password_file = {:?}\n\n\
         [security]\nauthorizer_enabled = true\n\
         super_users = [\"User:broker\", \"User:admin\"]\n",
        credentials.display().to_string(),
        password_file.display().to_string()
    );
    replicated::cluster(3, toml)
}

/// `borges --bootstrap ADDR` as `user` (password `USER-secret`, written to a file in `dir`)
/// with `stdin`; its exit status and output.
fn cli_as(addr: &str, dir: &Path, user: &str, args: &[&str], stdin: &str) -> std::process::Output {
    let pw = dir.join(format!("{user}.pw"));
    std::fs::write(&pw, format!("{user}-secret\n")).unwrap();
    let mut child = Command::new(borges_testkit::borges_bin())
        .args(["--bootstrap", addr, "--sasl-mechanism", "SCRAM-SHA-256"])
        .args(["--sasl-username", user, "--sasl-password-file"])
        .arg(&pw)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("borges");
    let mut input = child.stdin.take().expect("stdin");
    input.write_all(stdin.as_bytes()).expect("stdin");
    drop(input);
    child.wait_with_output().expect("wait")
}

/// [`cli_as`] that must succeed: its standard output.
fn cli_ok(addr: &str, dir: &Path, user: &str, args: &[&str], stdin: &str) -> String {
    let out = cli_as(addr, dir, user, args, stdin);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "borges {args:?}: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn as_user(addr: &str, user: &str, password: &str) -> borges_client::ClientConfig {
    let sasl = SaslConfig::scram("SCRAM-SHA-256", user, password).unwrap();
    replicated::client(addr).sasl(Some(sasl))
}

/// Whether `user` authenticates on node `id` (the admin client's first connection).
fn authenticates(c: &mut Cluster, id: u64, user: &str, password: &str) -> bool {
    let config = as_user(&c.node(id).addr(), user, password);
    runtime().block_on(Admin::new(config)).is_ok()
}

fn admin_on(c: &mut Cluster, id: u64, user: &str) -> Admin {
    let config = as_user(&c.node(id).addr(), user, &format!("{user}-secret"));
    runtime()
        .block_on(Admin::new(config))
        .expect("admin client")
}

fn code_of(r: &Result<(), ClientError>) -> Option<ErrorCode> {
    r.as_ref().err().and_then(ClientError::code)
}

fn upsert(
    admin: &Admin,
    u: &[ScramUpsertion],
    d: &[ScramDeletion],
) -> Vec<(String, Option<ErrorCode>)> {
    let results = runtime()
        .block_on(admin.alter_user_scram_credentials(u, d))
        .expect("AlterUserScramCredentials");
    results.into_iter().map(|(n, r)| (n, code_of(&r))).collect()
}

/// Every user's mechanisms and iterations, as node `id` describes them.
fn described(admin: &Admin) -> Vec<(String, Vec<(ScramMechanism, u32)>)> {
    let all = runtime()
        .block_on(admin.describe_user_scram_credentials(&[]))
        .expect("DescribeUserScramCredentials");
    all.into_iter()
        .map(|u| (u.name, u.credentials.expect("a described user")))
        .collect()
}

fn user(name: &str, iterations: u32) -> ScramUpsertion {
    ScramUpsertion::new(name, SHA256, iterations, &format!("{name}-secret")).unwrap()
}

/// Waits until `user` authenticates on every broker (`yes`) or on none.
fn wait_everywhere(c: &mut Cluster, user: &str, yes: bool) {
    let password = format!("{user}-secret");
    wait_until(&format!("{user} authenticates everywhere: {yes}"), || {
        (1..=3).all(|id| authenticates(c, id, user, &password) == yes)
    });
}

#[test]
fn scram_users_live_in_the_metadata_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = cluster(dir.path());
    assert!(!authenticates(&mut c, 2, "carol", "carol-secret"));
    let d = dir.path();
    let one = c.node(1).addr();
    let create = ["user", "create", "carol", "--password-stdin"];
    let out = cli_ok(&one, d, "admin", &create, "carol-secret\n");
    assert!(
        out.contains("Completed updating SCRAM-SHA-256 credential of user 'carol'"),
        "{out}"
    );
    // Broker 1 answered once its own cores had the new set: it authenticates carol now.
    assert!(
        authenticates(&mut c, 1, "carol", "carol-secret"),
        "{}",
        c.logs()
    );
    wait_everywhere(&mut c, "carol", true);
    assert!(!authenticates(&mut c, 3, "carol", "wrong"));
    in_the_log_and_in_no_file(&mut c, dir.path(), "carol");
    let listed = described(&admin_on(&mut c, 3, "admin"));
    let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        vec!["admin", "alice", "broker", "carol"],
        "the file's users carried over"
    );
    assert!(listed.iter().all(|(_, m)| m == &vec![(SHA256, 4096)]));
    refusals_change_nothing(&mut c, &listed);
    concurrent_creations_are_all_kept(&mut c);
    let deleted = upsert(
        &admin_on(&mut c, 3, "admin"),
        &[],
        &[ScramDeletion {
            name: "carol".into(),
            mechanism: SHA256,
        }],
    );
    assert_eq!(deleted, vec![("carol".to_string(), None)]);
    wait_everywhere(&mut c, "carol", false);
    upsert(&admin_on(&mut c, 2, "admin"), &[user("dave", 8192)], &[]);
    wait_everywhere(&mut c, "dave", true);
    restart_every_broker(&mut c);
    wait_everywhere(&mut c, "dave", true);
    wait_everywhere(&mut c, "carol", false);
    assert!(authenticates(&mut c, 2, "alice", "alice-secret"));
    inter_broker_user_replicates(&mut c);
}

/// The image holds `name`'s credential (no password in it); the brokers' file does not.
fn in_the_log_and_in_no_file(c: &mut Cluster, dir: &Path, name: &str) {
    for id in 1..=3 {
        let image = c.image_of(id).expect("image");
        assert!(image.scram_generation > 0, "node {id}");
        assert!(
            image.scram_credential(name, "SCRAM-SHA-256").is_some(),
            "node {id}"
        );
        let json = serde_json::to_string(&image).unwrap();
        assert!(
            !json.contains(&format!("{name}-secret")),
            "a password in the image"
        );
    }
    let file = std::fs::read_to_string(dir.join("credentials.toml")).unwrap();
    assert!(!file.contains(name), "the file holds {name}: {file}");
}

/// Bad iterations, an unknown user and a duplicate get their codes; alice (no ACL) may
/// neither alter nor describe; the credentials and their generation stay.
fn refusals_change_nothing(c: &mut Cluster, before: &[(String, Vec<(ScramMechanism, u32)>)]) {
    let generation = c.image_of(2).expect("image").scram_generation;
    let admin = admin_on(c, 2, "admin");
    let mut low = user("erin", 4096);
    low.iterations = 4095;
    let ghost = ScramDeletion {
        name: "ghost".into(),
        mechanism: SHA256,
    };
    let inter_broker = ScramDeletion {
        name: "broker".into(),
        mechanism: SHA256,
    };
    let results = upsert(
        &admin,
        &[low, user("frank", 4096), user("frank", 4096)],
        &[ghost, inter_broker],
    );
    let expected = [
        ("ghost", ErrorCode::ResourceNotFound),
        ("broker", ErrorCode::InvalidRequest),
        ("erin", ErrorCode::UnacceptableCredential),
        ("frank", ErrorCode::DuplicateResource),
    ];
    let expected: Vec<_> = expected
        .iter()
        .map(|(n, e)| (n.to_string(), Some(*e)))
        .collect();
    assert_eq!(results, expected);
    let alice = admin_on(c, 2, "alice");
    let refused =
        runtime().block_on(alice.alter_user_scram_credentials(&[user("mallory", 4096)], &[]));
    let code = refused.as_ref().err().and_then(ClientError::code);
    assert_eq!(
        code,
        Some(ErrorCode::ClusterAuthorizationFailed),
        "{refused:?}"
    );
    let refused = runtime().block_on(alice.describe_user_scram_credentials(&[]));
    let code = refused.as_ref().err().and_then(ClientError::code);
    assert_eq!(
        code,
        Some(ErrorCode::ClusterAuthorizationFailed),
        "{refused:?}"
    );
    assert_eq!(described(&admin), before);
    assert_eq!(c.image_of(2).expect("image").scram_generation, generation);
    let one = runtime().block_on(admin.describe_user_scram_credentials(&["ghost"]));
    let ghost = &one.expect("describe")[0];
    let code = ghost.credentials.as_ref().err().and_then(ClientError::code);
    assert_eq!(code, Some(ErrorCode::ResourceNotFound));
}

/// Users created at once through the three brokers (their changes race for one generation;
/// the losers compute again on the winner's set): every one is kept.
fn concurrent_creations_are_all_kept(c: &mut Cluster) {
    let admins: Vec<Admin> = (1..=3).map(|id| admin_on(c, id, "admin")).collect();
    let create = |i: usize| {
        let admin = admins[i].clone();
        async move {
            let mut results = Vec::new();
            for j in 0..3 {
                let u = user(&format!("racer{i}{j}"), 4096);
                let r = admin.alter_user_scram_credentials(&[u], &[]).await;
                results.extend(r.expect("AlterUserScramCredentials"));
            }
            results
        }
    };
    let rt = runtime();
    let (a, b, c3) = rt.block_on(async { tokio::join!(create(0), create(1), create(2)) });
    for (name, r) in a.into_iter().chain(b).chain(c3) {
        assert!(r.is_ok(), "{name}: {r:?}");
    }
    let racers: Vec<String> = described(&admins[0])
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.starts_with("racer"))
        .collect();
    assert_eq!(
        racers.len(),
        9,
        "a concurrent creation was lost: {racers:?}"
    );
    let deletions: Vec<ScramDeletion> = racers
        .into_iter()
        .map(|name| ScramDeletion {
            name,
            mechanism: SHA256,
        })
        .collect();
    let deleted = upsert(&admins[0], &[], &deletions);
    assert!(deleted.iter().all(|(_, e)| e.is_none()), "{deleted:?}");
}

fn restart_every_broker(c: &mut Cluster) {
    for id in 1..=3 {
        c.kill9(id);
    }
    for id in 1..=3 {
        c.restart_nowait(id);
    }
    for id in 1..=3 {
        c.wait_ready(id);
    }
}

/// acks=all with min.insync.replicas=3: the followers fetch as the inter-broker user, whose
/// credential now comes from the metadata log.
fn inter_broker_user_replicates(c: &mut Cluster) {
    let admin = admin_on(c, 1, "admin");
    let topic = borges_client::NewTopic::new("secured", 1)
        .replication_factor(3)
        .config("min.insync.replicas", "3");
    runtime()
        .block_on(admin.create_topics(vec![topic]))
        .expect("topic");
    let bootstrap = c.bootstrap();
    let sent = runtime().block_on(replicated::produce_with(
        as_user(&bootstrap, "admin", "admin-secret"),
        ("secured", 0),
        values("v", 5),
        acks_all(20, 30_000),
    ));
    let (log, _) = runtime().block_on(replicated::read_to_high_watermark_with(
        as_user(&bootstrap, "admin", "admin-secret"),
        "secured",
        0,
    ));
    assert_eq!(check_acked(&sent, &log), 5, "{sent:?}\n{}", c.logs());
}

/// A single node answers the API from its credentials file, as `borges user` without
/// `--bootstrap` edits it: a user created through the API is in the file and authenticates;
/// deleted, it is refused.
#[test]
fn a_single_node_keeps_api_users_in_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let broker = BrokerProcess::start_with(BrokerOptions {
        args: vec!["--sasl-enabled-mechanisms".into(), "SCRAM-SHA-256".into()],
        ..BrokerOptions::default()
    });
    let file = broker.data_dir().join("sasl-credentials.toml");
    create_file_user(&file, "admin", "admin-secret");
    let addr = broker.bootstrap();
    let d = dir.path();
    wait_until("admin authenticates", || {
        runtime()
            .block_on(Admin::new(as_user(&addr, "admin", "admin-secret")))
            .is_ok()
    });
    let create = [
        "user",
        "create",
        "carol",
        "--password-stdin",
        "--iterations",
        "8192",
    ];
    cli_ok(&addr, d, "admin", &create, "carol-secret\n");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("carol") && !text.contains("carol-secret"),
        "{text}"
    );
    let carol = || {
        runtime()
            .block_on(Admin::new(as_user(&addr, "carol", "carol-secret")))
            .is_ok()
    };
    assert!(carol(), "{}", broker.log());
    let listed = cli_ok(&addr, d, "admin", &["user", "list"], "");
    assert!(
        listed.contains("'carol' are SCRAM-SHA-256=iterations=8192"),
        "{listed}"
    );
    let bad = cli_as(&addr, d, "admin", &["user", "delete", "nobody"], "");
    assert!(!bad.status.success());
    cli_ok(&addr, d, "admin", &["user", "delete", "carol"], "");
    assert!(!carol(), "a deleted user authenticated");
    assert!(!std::fs::read_to_string(&file).unwrap().contains("carol"));
}
