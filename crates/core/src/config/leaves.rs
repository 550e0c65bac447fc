//! The one walk over a TOML table's leaves that the configuration's
//! checks share: a leaf's dotted key is its tables' names, and a list's
//! items are each under the list's own key.

/// Calls `visit` with the dotted key (under `prefix`, if not empty) and
/// the value of every leaf of `table` (what is neither a table nor a
/// list), those in lists included, in the table's order.
pub fn for_each_leaf(prefix: &str, table: &mut toml::Table, visit: &mut dyn FnMut(&str, &mut toml::Value)) {
    fn walk(value: &mut toml::Value, key: &str, visit: &mut dyn FnMut(&str, &mut toml::Value)) {
        match value {
            toml::Value::Table(table) => for_each_leaf(key, table, visit),
            toml::Value::Array(values) => values.iter_mut().for_each(|value| walk(value, key, visit)),
            leaf => visit(key, leaf),
        }
    }
    for (name, value) in table.iter_mut() {
        let key = if prefix.is_empty() { name.clone() } else { format!("{prefix}.{name}") };
        walk(value, &key, visit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_leaf_comes_under_its_dotted_key_those_in_lists_under_the_lists() {
        let mut table: toml::Table =
            toml::from_str("a = 1\nlist = [2, [3], { inner = 4 }]\n[t]\nb = \"x\"\n[t.u]\nc = true\n").unwrap();
        let mut seen = Vec::new();
        for_each_leaf("", &mut table, &mut |key, value| seen.push(format!("{key}={value}")));
        assert_eq!(seen, ["a=1", "list=2", "list=3", "list.inner=4", "t.b=\"x\"", "t.u.c=true"]);
        seen.clear();
        for_each_leaf("echo", &mut table, &mut |key, value| {
            *value = toml::Value::Integer(0);
            seen.push(key.to_owned());
        });
        assert_eq!(seen[0], "echo.a");
        assert_eq!(table["t"]["u"]["c"], toml::Value::Integer(0), "a leaf changed in place");
    }
}
