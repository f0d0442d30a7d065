//! A group member commits the position of every partition it was assigned, also those it
//! reached no record in, and never past what it printed: a second member continues exactly
//! where the first stopped (issue 18, item 1).

mod common;

use std::collections::BTreeSet;

use borges_testkit::BrokerProcess;
use common::{borges, ok};

/// The scenario of the issue: 4 partitions, 400 records; one member reads 150 from the
/// beginning, the next member reads 250: together every record exactly once.
#[test]
fn a_second_member_continues_where_the_first_stopped_in_every_partition() {
    let broker = BrokerProcess::start();
    ok(borges(
        &broker,
        &["topic", "create", "t", "--partitions", "4"],
        None,
    ));
    // Keyed records spread over the four partitions (murmur2), about 100 each.
    let input: String = (0..400).map(|i| format!("k{i}:v{i}\n")).collect();
    ok(borges(
        &broker,
        &["produce", "t", "--key-separator", ":"],
        Some(&input),
    ));
    let consume = |extra: &[&str]| {
        let mut args = vec!["consume", "t", "--group", "g", "--print-partition"];
        args.extend_from_slice(extra);
        ok(borges(&broker, &args, None))
    };
    let first = consume(&["--from-beginning", "--max-messages", "150"]);
    // A guard against waiting forever when records went missing; not a timing assertion.
    let second = consume(&["--max-messages", "250", "--timeout-ms", "10000"]);

    let values = |text: &str| -> Vec<String> {
        text.lines()
            .map(|l| {
                l.split('\t')
                    .nth(1)
                    .expect("Partition:P\tVALUE")
                    .to_string()
            })
            .collect()
    };
    let (first, second) = (values(&first), values(&second));
    assert_eq!(first.len(), 150);
    assert_eq!(second.len(), 250, "the second member got {second:?}");
    let all: BTreeSet<&String> = first.iter().chain(&second).collect();
    assert_eq!(all.len(), 400, "every record exactly once");
    let expected: BTreeSet<String> = (0..400).map(|i| format!("v{i}")).collect();
    assert_eq!(all, expected.iter().collect());
}
