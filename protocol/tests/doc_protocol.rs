//! docs/protocol.md must stay true: its error code table lists every ErrorCode with its number
//! and retriable flag, its API table lists every ApiKey with its key and versions (or "not
//! served"), and its worked example frame is what the encoder produces.

use borges_protocol::message::{encode_message, MessageHead};
use borges_protocol::{wire, ApiKey, ErrorCode};

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md")).unwrap()
}

/// Cells of the markdown table rows whose first cell is a number.
fn numbered_rows(doc: &str) -> Vec<Vec<String>> {
    doc.lines()
        .filter_map(|l| l.strip_prefix('|'))
        .map(|l| {
            l.split('|')
                .map(|c| c.trim().trim_matches('`').to_string())
                .collect::<Vec<_>>()
        })
        .filter(|cells| cells.first().is_some_and(|c| c.parse::<u32>().is_ok()))
        .collect()
}

#[test]
fn error_code_table_lists_every_code() {
    let doc = doc();
    let rows = numbered_rows(&doc);
    for &code in ErrorCode::ALL {
        let row = rows
            .iter()
            .find(|r| r.len() >= 3 && r[1] == code.name())
            .unwrap_or_else(|| panic!("docs/protocol.md lacks error code {}", code.name()));
        assert_eq!(row[0], (code as u16).to_string(), "{}", code.name());
        let retriable = if code.is_retriable() { "yes" } else { "no" };
        assert_eq!(row[2], retriable, "retriable flag of {}", code.name());
    }
}

#[test]
fn api_table_lists_every_api() {
    let doc = doc();
    let rows = numbered_rows(&doc);
    for &key in ApiKey::ALL {
        let row = rows
            .iter()
            .find(|r| r.len() >= 3 && r[1] == key.name())
            .unwrap_or_else(|| panic!("docs/protocol.md lacks API {}", key.name()));
        assert_eq!(row[0], (key as u16).to_string(), "{}", key.name());
        let versions = if key.is_served() {
            format!("{}..={}", key.min_version(), key.max_version())
        } else {
            "not served".to_string()
        };
        assert_eq!(row[2], versions, "{}", key.name());
    }
}

/// The worked example: an ApiVersions request (client "demo"), correlation id 1, no payload.
fn example_frame_hex() -> String {
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let name = fbb.create_string("demo");
    let root = wire::ApiVersionsRequest::create(
        &mut fbb,
        &wire::ApiVersionsRequestArgs {
            client_software_name: Some(name),
            client_software_version: None,
        },
    );
    fbb.finish_minimal(root);
    let frame = encode_message(MessageHead::request(ApiKey::ApiVersions, 0, 1), &fbb, &[]).unwrap();
    frame.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn worked_example_matches_the_encoder() {
    let hex = example_frame_hex();
    println!("{hex}");
    let doc = doc();
    let in_doc: String = doc
        .lines()
        .skip_while(|l| !l.starts_with("<!-- example-frame -->"))
        .skip(2)
        .take_while(|l| !l.starts_with("```"))
        .flat_map(|l| l.split("  ").next().unwrap_or("").split_whitespace())
        .collect();
    assert_eq!(in_doc, hex);
}

/// Every table and struct of the schema has a field table in the doc listing all its fields in
/// schema order (read from the generated object API types).
#[test]
fn field_tables_cover_the_schema() {
    let doc = doc();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/generated/borges/wire");
    let mut checked = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let source = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let mut lines = source.lines();
        while let Some(line) = lines.next() {
            let Some(name) = line
                .strip_prefix("pub struct ")
                .and_then(|rest| rest.strip_suffix("T {"))
            else {
                continue;
            };
            let fields: Vec<&str> = lines
                .by_ref()
                .take_while(|l| *l != "}")
                .filter_map(|l| l.trim().strip_prefix("pub "))
                .map(|l| l.split(':').next().unwrap())
                .collect();
            let heading = format!("#### {name} (");
            let section = doc
                .split("\n#### ")
                .find(|s| format!("#### {s}").starts_with(&heading))
                .unwrap_or_else(|| panic!("docs/protocol.md lacks a field table for {name}"));
            // The section ends at the next heading.
            let section = section.split("\n#").next().unwrap_or(section);
            let documented: Vec<&str> = section
                .lines()
                .filter_map(|l| l.strip_prefix("| "))
                .filter(|l| {
                    l.split('|')
                        .next()
                        .is_some_and(|c| c.trim().parse::<u32>().is_ok())
                })
                .filter_map(|l| l.split('`').nth(1))
                .collect();
            assert_eq!(documented, fields, "fields of {name} in docs/protocol.md");
            checked += 1;
        }
    }
    assert!(checked > 80, "found only {checked} tables");
}

#[test]
fn crc32c_check_value_in_the_doc_holds() {
    assert!(doc().contains("`crc32c(\"123456789\") = 0xE3069283`"));
    assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
}
