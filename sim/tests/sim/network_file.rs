//! Tests: network files. The shipped `docs/resnet-mini.toml` is exactly
//! the built-in resnet-mini with its defaults, `docs/resnet-mini-branches.toml`
//! the same with parallel branches, and a network read from a file is the
//! network the planner prices.

use std::path::Path;

use tessera_sim::model::{NetworkConfig, NetworkFile, NetworkFileError};
use tessera_sim::plan::ModelTable;
use tessera_sim::train::{RESNET_MINI_BLOCKS, RESNET_MINI_WIDTHS, TrainConfig};

fn docs(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(name)
}

#[test]
fn the_shipped_resnet_mini_file_is_the_builtin_with_its_defaults() {
    let file = NetworkFile::read(&docs("resnet-mini.toml")).unwrap();
    let builtin =
        NetworkConfig::resnet_mini([1, 8, 8], 10, &RESNET_MINI_WIDTHS, &RESNET_MINI_BLOCKS);
    assert_eq!(file.name, "resnet-mini");
    assert_eq!(file.network, builtin);
    // The trainer's resnet-mini job carries the same network (its classes
    // set from the data).
    let job = TrainConfig::resnet_mini([1, 8, 8]).network.unwrap();
    assert_eq!(NetworkConfig { classes: 10, ..job }, file.network);
    assert_eq!(
        ModelTable::from_network(&file.network).unwrap(),
        ModelTable::from_network(&builtin).unwrap()
    );
}

#[test]
fn the_shipped_branches_file_is_the_builtin_with_branches() {
    let file = NetworkFile::read(&docs("resnet-mini-branches.toml")).unwrap();
    let builtin =
        NetworkConfig::resnet_mini([1, 8, 8], 10, &RESNET_MINI_WIDTHS, &RESNET_MINI_BLOCKS)
            .with_branches(8);
    assert_eq!(file.name, "resnet-mini-branches");
    assert_eq!(file.network, builtin);
    builtin.validate().unwrap();
    assert_eq!(
        ModelTable::from_network(&file.network).unwrap(),
        ModelTable::from_network(&builtin).unwrap()
    );
}

#[test]
fn a_planners_cost_table_is_not_a_network() {
    let origin = "t.toml";
    let table = "input_bytes = 4\n[[layer]]\nname = \"a\"\nparams = 1\nflops_forward = 1\n\
                 flops_backward = 1\nactivation_bytes = 1\n";
    assert!(ModelTable::from_toml_str(table, origin).is_ok());
    // Numbers a TOML table of any values cannot hold do not hide it.
    let table = &table.replace("params = 1", &format!("params = {}", u64::MAX));
    assert_eq!(
        NetworkFile::from_toml_str(table, origin),
        Err(NetworkFileError::CostTable {
            origin: origin.into()
        })
    );
}
