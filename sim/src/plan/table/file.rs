//! Tables read from TOML files (the format is in the [module docs](super)).

use std::path::Path;

use serde::Deserialize;

use super::error::ModelTableError;
use super::layer::Layer;
use super::model_table::ModelTable;
use crate::toml_place::{one_line, place};

/// The TOML file's top level.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    name: Option<String>,
    input_bytes: u64,
    #[serde(rename = "layer")]
    layers: Vec<Layer>,
}

impl ModelTable {
    /// Parses a TOML model description (see the [module docs](super));
    /// `origin` (the file's path) names it in errors, and is its name if
    /// the file gives none.
    ///
    /// # Errors
    /// [`ModelTableError::Parse`] naming the line, the layer and (in the
    /// parser's message) the key; the errors of [`ModelTable::new`].
    ///
    /// ```
    /// use tessera_sim::plan::{ModelTable, ModelTableError};
    ///
    /// let toml = r#"
    /// input_bytes = 260
    /// [[layer]]
    /// name = "fc"
    /// params = 650
    /// flops_forward = 1280
    /// flops_backward = 2560
    /// activation_bytes = 128
    /// "#;
    /// let table = ModelTable::from_toml_str(toml, "tiny.toml")?;
    /// assert_eq!((table.name(), table.params()), ("tiny.toml", 650)); // named after its origin
    /// let negative = ModelTable::from_toml_str("input_bytes = -1", "bad.toml");
    /// assert!(matches!(negative, Err(ModelTableError::Parse { line: Some(1), .. })));
    /// # Ok::<(), tessera_sim::plan::ModelTableError>(())
    /// ```
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self, ModelTableError> {
        let file: File = toml::from_str(text).map_err(|e| {
            let (line, layer) = place(text, &e, "name");
            ModelTableError::Parse {
                origin: origin.to_owned(),
                line,
                layer,
                message: one_line(e.message()),
            }
        })?;
        let name = file.name.unwrap_or_else(|| origin.to_owned());
        Self::checked(name, origin, file.input_bytes, file.layers)
    }

    /// Reads a TOML model description from `path`.
    ///
    /// # Errors
    /// [`ModelTableError::Read`]; the errors of
    /// [`ModelTable::from_toml_str`].
    ///
    /// ```
    /// use std::path::Path;
    /// use tessera_sim::plan::{ModelTable, ModelTableError};
    ///
    /// let missing = ModelTable::read(Path::new("no/such/model.toml"));
    /// assert!(matches!(missing, Err(ModelTableError::Read { .. })));
    /// ```
    pub fn read(path: &Path) -> Result<Self, ModelTableError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ModelTableError::Read {
            origin: origin.clone(),
            message: e.to_string(),
        })?;
        Self::from_toml_str(&text, &origin)
    }
}
