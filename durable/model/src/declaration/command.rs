//! `[[command]]` declarations: the list, each command's own keys and its resource key.

use std::collections::BTreeMap;

use super::budget::{parse_admission, parse_intake};
use super::handler::parse_handler;
use super::limits::parse_limits;
use super::model::{CommandDecl, ParamDecl, QuotaPoolDecl, ResourceKeyDecl};
use super::names::{check_code, first_duplicate};
use super::params::parse_parameters;
use super::waiting_page::parse_waiting_page;
use super::walk::{Obj, Result, char_len};
use crate::field_error::FieldError;

/// Most `[[command]]` entries, to bound the work of one declaration.
const MAX_COMMANDS: usize = 256;
/// Default and bounds of `deadline_seconds` (at most 30 days).
const DEFAULT_DEADLINE_SECONDS: u32 = 600;
const MAX_DEADLINE_SECONDS: u32 = 2_592_000;
/// Longest constant resource key.
const MAX_CONSTANT_KEY_LEN: usize = 128;

/// Every key a `[[command]]` table may hold.
const COMMAND_KEYS: &[&str] = &[
    "code",
    "parameters",
    "resource_key",
    "deadline_seconds",
    "intake",
    "admission",
    "handler",
    "limits",
    "waiting_page",
];

/// Parses every `[[command]]`, refusing duplicate codes (naming the later one).
pub(crate) fn parse_commands(root: &Obj<'_>, pools: &[QuotaPoolDecl]) -> Result<Vec<CommandDecl>> {
    let tables = root.opt_table_list("command")?;
    if tables.len() > MAX_COMMANDS {
        return Err(root.error("command", format!("at most {MAX_COMMANDS} commands")));
    }
    let commands = tables
        .iter()
        .map(|table| parse_command(table, pools))
        .collect::<Result<Vec<_>>>()?;
    if let Some((i, dup)) = first_duplicate(commands.iter().map(|c| c.code.as_str())) {
        return Err(FieldError::new(
            format!("command[{i}].code"),
            format!("duplicate command code \"{dup}\""),
        ));
    }
    Ok(commands)
}

/// Parses one `[[command]]`; parameters come first because later keys refer to them.
fn parse_command(cmd: &Obj<'_>, pools: &[QuotaPoolDecl]) -> Result<CommandDecl> {
    cmd.allow_only(COMMAND_KEYS)?;
    let code = cmd.req_str("code")?;
    check_code(code, &cmd.field("code"))?;
    let parameters = parse_parameters(cmd)?;
    let resource_key = parse_resource_key(cmd, &parameters)?;
    let deadline_seconds = cmd
        .opt_num("deadline_seconds", 1..=MAX_DEADLINE_SECONDS)?
        .unwrap_or(DEFAULT_DEADLINE_SECONDS);
    Ok(CommandDecl {
        code: code.to_owned(),
        resource_key,
        deadline_seconds,
        intake: parse_intake(cmd)?,
        admission: parse_admission(cmd, deadline_seconds)?,
        handler: parse_handler(cmd, pools)?,
        limits: parse_limits(cmd, &parameters)?,
        waiting_page: parse_waiting_page(cmd)?,
        parameters,
    })
}

/// Parses the required `resource_key`: an input parameter or a constant.
fn parse_resource_key(
    cmd: &Obj<'_>,
    parameters: &BTreeMap<String, ParamDecl>,
) -> Result<ResourceKeyDecl> {
    let key = cmd.req_table("resource_key")?;
    match key.req_str("from")? {
        "input" => {
            key.allow_only(&["from", "field"])?;
            let field = key.req_str("field")?;
            if !parameters.contains_key(field) {
                return Err(key.error("field", format!("\"{field}\" is not a declared parameter")));
            }
            Ok(ResourceKeyDecl::Input {
                field: field.to_owned(),
            })
        }
        "constant" => {
            key.allow_only(&["from", "value"])?;
            let value = key.req_str("value")?;
            if value.is_empty() || char_len(value) > MAX_CONSTANT_KEY_LEN {
                return Err(key.error(
                    "value",
                    format!("must be 1 to {MAX_CONSTANT_KEY_LEN} characters"),
                ));
            }
            Ok(ResourceKeyDecl::Constant {
                value: value.to_owned(),
            })
        }
        _ => Err(key.error("from", "must be one of input, constant")),
    }
}
