//! A job's model when it is a network: resnet-mini of its options, or a
//! network file, over the base job.

use std::path::Path;

use tessera_sim::data::Source;
use tessera_sim::ipu::Target;
use tessera_sim::model::{BnGroup, NetworkConfig, NetworkFile, NetworkFileError, bounds};
use tessera_sim::train::{RESNET_MINI_BLOCKS, RESNET_MINI_WIDTHS, TrainConfig};

use super::args::JobArgs;
use super::resolved::NetworkSource;
use super::values::ModelArg;
use crate::cli::Failure;
use crate::cli::output::one_line;

impl JobArgs {
    /// `base`, or resnet-mini's defaults when a network is asked for over
    /// an MLP `base`, with the network's options applied; where the
    /// network came from.
    pub(super) fn model_over(
        &self,
        base: &TrainConfig,
        source: &Source,
    ) -> Result<(TrainConfig, Option<NetworkSource>), Failure> {
        let resnet = match &self.model {
            Some(ModelArg::ResnetMini) => true,
            Some(ModelArg::Mlp) => false,
            Some(ModelArg::File(path)) => return self.network_file(path, base, source),
            None => base.network.is_some(),
        };
        let net_options = [
            ("--widths", self.widths.is_some()),
            ("--blocks", self.blocks.is_some()),
            ("--branches", self.branches.is_some()),
            ("--bn-group", self.bn_group.is_some()),
        ];
        if !resnet {
            if let Some((flag, _)) = net_options.iter().find(|(_, given)| *given) {
                return Err(Failure::Usage(format!(
                    "{flag} is an option of --model resnet-mini, not of the MLP"
                )));
            }
            let mut c = base.clone();
            c.network = None;
            return Ok((c, None));
        }
        if let Some(flag) = self.mlp_option() {
            return Err(Failure::Usage(format!(
                "{flag} is an option of the MLP (--model mlp), not of --model resnet-mini: \
                 its layers are set by --widths and --blocks"
            )));
        }
        let input = image_shape(source)?;
        let mut c = network_base(base, input);
        let widths = self
            .widths
            .clone()
            .unwrap_or_else(|| RESNET_MINI_WIDTHS.to_vec());
        let blocks = self
            .blocks
            .clone()
            .unwrap_or_else(|| RESNET_MINI_BLOCKS.to_vec());
        let old = c
            .network
            .take()
            .unwrap_or_else(|| NetworkConfig::resnet_mini(input, 0, &[], &[]));
        let mut net = resnet_mini(input, old.classes, &widths, &blocks, self.branches)?;
        net.bn_group = self.bn_group.map_or(old.bn_group, BnGroup::from);
        c.network = Some(net);
        Ok((
            c,
            Some(NetworkSource::ResnetMini(widths, blocks, self.branches)),
        ))
    }

    /// The first of the MLP's options given, if any.
    fn mlp_option(&self) -> Option<&'static str> {
        [
            ("--hidden", self.hidden.is_some()),
            ("--activation", self.activation.is_some()),
            ("--batch-norm", self.batch_norm.is_some()),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }

    /// [`JobArgs::model_over`] for the network file at `path`: its network
    /// with resnet-mini's hyperparameters, `--bn-group` applied.
    fn network_file(
        &self,
        path: &Path,
        base: &TrainConfig,
        source: &Source,
    ) -> Result<(TrainConfig, Option<NetworkSource>), Failure> {
        let shown = path.display();
        let resnet_option = [
            ("--widths", self.widths.is_some()),
            ("--blocks", self.blocks.is_some()),
            ("--branches", self.branches.is_some()),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag));
        if let Some(flag) = resnet_option.or_else(|| self.mlp_option()) {
            return Err(Failure::Usage(format!(
                "{flag} is not an option of a network file (--model {shown}): its layers are the file's"
            )));
        }
        let file = NetworkFile::read(path).map_err(|e| {
            Failure::Usage(match e {
                NetworkFileError::CostTable { .. } => format!(
                    "--model {shown}: describes costs (a planner's table with `input_bytes`), \
                     not a network: train needs `input` and layers of a `kind` (docs/training.md)"
                ),
                e => one_line(&e.to_string()),
            })
        })?;
        let input = file.network.input;
        if let Ok(shape) = image_shape(source)
            && shape != input
        {
            return Err(Failure::Usage(format!(
                "--model {shown}: its input is {input:?} (channels, height, width) but the data's \
                 images are {shape:?}"
            )));
        }
        let mut c = network_base(base, input);
        let old = c.network.take().map(|n| n.classes).unwrap_or_default();
        let bn_group = self.bn_group.map_or(file.network.bn_group, BnGroup::from);
        c.network = Some(NetworkConfig {
            classes: old,
            bn_group,
            ..file.network
        });
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let classes = file.classes_given.then_some(file.network.classes);
        Ok((c, Some(NetworkSource::File(absolute, classes))))
    }
}

/// resnet-mini on `input` images of `classes` classes: stages of `widths`
/// channels and `blocks` residual blocks, and a block of parallel branches
/// of `branches` channels each if given (`--widths`, `--blocks`,
/// `--branches` of `train`, `scale` and `plan`).
pub(in crate::cli) fn resnet_mini(
    input: [usize; 3],
    classes: usize,
    widths: &[usize],
    blocks: &[usize],
    branches: Option<usize>,
) -> Result<NetworkConfig, Failure> {
    if widths.len() != blocks.len() {
        return Err(Failure::Usage(format!(
            "--widths {widths:?} and --blocks {blocks:?}: give as many block counts as widths"
        )));
    }
    // Each block is layers: a count above the bound is refused before
    // the blocks are made (`--blocks 18446744073709551615`).
    let total = blocks.iter().try_fold(0usize, |a, &b| a.checked_add(b));
    if total.is_none_or(|t| t > bounds::MAX_LAYERS) {
        return Err(Failure::Usage(format!(
            "--blocks {}: more residual blocks than the {} layers the simulator supports",
            list(blocks),
            bounds::MAX_LAYERS
        )));
    }
    let net = NetworkConfig::resnet_mini(input, classes, widths, blocks);
    let net = match branches {
        Some(channels) => net.with_branches(channels),
        None => net,
    };
    bounds::check(&net).map_err(|e| {
        Failure::Usage(format!(
            "--widths {} --blocks {}: {e}",
            list(widths),
            list(blocks)
        ))
    })?;
    Ok(net)
}

/// `1,2,3`: a list as the command line gives it.
fn list(values: &[usize]) -> String {
    values
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The model's bounds, checked from its description before anything is
/// built for it ([`bounds`]): an MLP's depth; a network's least tile
/// memory against its replica's IPUs (a network's shape is checked where
/// it is made), naming the options that made it.
pub(super) fn check_bounds(
    c: &TrainConfig,
    network: Option<&NetworkSource>,
) -> Result<(), Failure> {
    let Some(net) = &c.network else {
        if c.hidden.len() >= bounds::MAX_LAYERS {
            return Err(Failure::Usage(format!(
                "--hidden: {} layers and the head are more than the {} layers the simulator \
                 supports",
                c.hidden.len(),
                bounds::MAX_LAYERS
            )));
        }
        return Ok(());
    };
    let ipus = u32::try_from(c.ipus_per_replica).unwrap_or(u32::MAX);
    // A replica the Pod cannot have is the distribution's check's to refuse.
    let Ok(target) = Target::new(*c.pod.ipu(), ipus) else {
        return Ok(());
    };
    // Its head is the data's classes, not known yet: one at least.
    let net = NetworkConfig {
        classes: net.classes.max(1),
        ..net.clone()
    };
    bounds::check_fits(&net, &target, c.micro_batch).map_err(|e| {
        let options = match network {
            Some(NetworkSource::ResnetMini(widths, blocks, _)) => {
                format!("--widths {} --blocks {}", list(widths), list(blocks))
            }
            Some(NetworkSource::File(path, _)) => format!("--model {}", path.display()),
            None => "--model".to_owned(),
        };
        Failure::Usage(format!("{options}: {e}"))
    })?;
    Ok(())
}

/// `base` if it has a network, else resnet-mini's job for `input` images
/// (its hyperparameters).
fn network_base(base: &TrainConfig, input: [usize; 3]) -> TrainConfig {
    if base.network.is_some() {
        base.clone()
    } else {
        TrainConfig::resnet_mini(input)
    }
}

/// The images' shape a network reads from `source`: synthetic images'
/// own, 1x8x8 for the digits.
fn image_shape(source: &Source) -> Result<[usize; 3], Failure> {
    match source {
        Source::Images { shape, .. } => Ok([shape.0, shape.1, shape.2]),
        Source::Digits => Ok([1, 8, 8]),
        _ => Err(Failure::Usage(format!(
            "model: resnet-mini reads images (digits or images:SAMPLES:CxHxW:CLASSES), not {source}"
        ))),
    }
}
