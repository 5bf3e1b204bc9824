//! A list option given as one text: Go's SDK sends every option as text, so
//! a repeated flag (`--kafka_property` twice) arrives as a JSON list of
//! strings, `["a=1","b=2"]` (`beamkafka.dev/go/beamkafka`).

/// The strings of `text` if it is a JSON list of strings; `None` otherwise.
pub fn json_strings(text: &str) -> Option<Vec<String>> {
    let mut chars = text.trim().chars().peekable();
    let mut out = Vec::new();
    let skip_spaces = |c: &mut std::iter::Peekable<std::str::Chars>| {
        while c.peek().is_some_and(|x| x.is_whitespace()) {
            c.next();
        }
    };
    if chars.next()? != '[' {
        return None;
    }
    skip_spaces(&mut chars);
    if chars.peek() == Some(&']') {
        chars.next();
        return chars.next().is_none().then_some(out);
    }
    loop {
        skip_spaces(&mut chars);
        if chars.next()? != '"' {
            return None;
        }
        let mut s = String::new();
        loop {
            match chars.next()? {
                '"' => break,
                '\\' => s.push(match chars.next()? {
                    '"' => '"',
                    '\\' => '\\',
                    '/' => '/',
                    'b' => '\u{8}',
                    'f' => '\u{c}',
                    'n' => '\n',
                    'r' => '\r',
                    't' => '\t',
                    'u' => {
                        let hex: String = (0..4).map(|_| chars.next()).collect::<Option<String>>()?;
                        char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?
                    }
                    _ => return None,
                }),
                c => s.push(c),
            }
        }
        out.push(s);
        skip_spaces(&mut chars);
        match chars.next()? {
            ',' => continue,
            ']' => return chars.next().is_none().then_some(out),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_list_of_strings_is_read_and_anything_else_is_not() {
        assert_eq!(json_strings(r#"["a=1", "b=\"2\"\\\n\u0041"]"#).unwrap(), ["a=1", "b=\"2\"\\\nA"]);
        assert_eq!(json_strings(" [ ] ").unwrap(), Vec::<String>::new());
        for not in ["a=1", "[a=1]", r#"["a"#, r#"["a",]"#, r#"["a"] x"#, r#"["\q"]"#, r#"["\u00G1"]"#, r#"[1]"#] {
            assert_eq!(json_strings(not), None, "{not}");
        }
    }
}
