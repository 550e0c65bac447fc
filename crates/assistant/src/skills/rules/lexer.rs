//! The shell's tokens of a command line: words with their quoting noted,
//! operators and redirection operators, and what the line holds beyond
//! its words (substitutions, what cannot be read), for `shell` to
//! assemble into simple commands.

/// A word of a simple command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Word {
    /// What the shell passes on, quotes and escapes removed; variables stay
    /// as written (`$HOME`).
    pub(super) text: String,
    /// It expands a variable outside single quotes: the shell decides its text.
    pub(super) expands: bool,
    /// An unquoted `*`, `?` or `[`: the shell may put file names in its place.
    pub(super) glob: bool,
    /// It starts with an unquoted glob, so a file name it becomes may read as an option.
    pub(super) leading_glob: bool,
    /// Unquoted `{a,b}` or `{1..3}`: the shell makes several words of it.
    pub(super) braces: bool,
    /// Part of it was quoted or escaped.
    pub(super) quoted: bool,
}

impl Word {
    /// A plain word: what it says is what runs.
    pub(super) fn is_plain(&self) -> bool {
        !(self.expands || self.glob || self.braces)
    }
}

/// What a line holds beyond its tokens.
#[derive(Debug, Default)]
pub(super) struct Notes {
    /// The forms of substitution found: `$(…)`, `` `…` ``, `<(…)`, `>(…)`.
    pub(super) substitutions: Vec<&'static str>,
    /// What could not be followed, in words for the user.
    pub(super) unreadable: Vec<&'static str>,
    /// The text inside substitutions in double quotes.
    pub(super) quoted_inner: Vec<String>,
}

/// One token of a command line.
pub(super) enum Token {
    Word(Word),
    Op(&'static str),
    Redirect(&'static str),
}

/// The tokens of `line`, and what was noted on the way.
pub(super) fn read(line: &str) -> (Vec<Token>, Notes) {
    let mut lexer = Lexer {
        chars: line.chars().peekable(),
        tokens: Vec::new(),
        word: None,
        unquoted: String::new(),
        notes: Notes::default(),
    };
    lexer.run();
    (lexer.tokens, lexer.notes)
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    tokens: Vec<Token>,
    word: Option<Word>,
    /// The unquoted characters of the word so far: where brace expansion lives.
    unquoted: String,
    notes: Notes,
}

impl Lexer<'_> {
    fn run(&mut self) {
        while let Some(c) = self.chars.next() {
            match c {
                ' ' | '\t' | '\r' => self.end_word(),
                '\n' | ';' => self.op(";"),
                '\\' => match self.chars.next() {
                    Some('\n') => {}
                    Some(escaped) => self.quoted(escaped),
                    None => self.literal('\\'),
                },
                '\'' => self.single_quoted(),
                '"' => self.double_quoted(),
                '$' => self.dollar(),
                '`' => {
                    self.notes.substitutions.push("`…`");
                    self.op("`");
                }
                '<' | '>' if self.chars.peek() == Some(&'(') => {
                    self.notes.substitutions.push(if c == '<' { "<(…)" } else { ">(…)" });
                }
                '<' | '>' => self.redirect(c),
                '&' if self.chars.next_if_eq(&'&').is_some() => self.op("&&"),
                '&' if self.chars.next_if_eq(&'>').is_some() => {
                    let op = if self.chars.next_if_eq(&'>').is_some() { "&>>" } else { "&>" };
                    self.end_word();
                    self.tokens.push(Token::Redirect(op));
                }
                '&' => self.op("&"),
                '|' if self.chars.next_if_eq(&'|').is_some() => self.op("||"),
                '|' if self.chars.next_if_eq(&'&').is_some() => self.op("|&"),
                '|' => self.op("|"),
                '(' => self.op("("),
                ')' => self.op(")"),
                c => self.literal(c),
            }
        }
        self.end_word();
    }

    fn word(&mut self) -> &mut Word {
        self.word.get_or_insert_with(Word::default)
    }

    fn end_word(&mut self) {
        if let Some(mut word) = self.word.take() {
            word.braces = has_brace_expansion(&self.unquoted);
            self.unquoted.clear();
            self.tokens.push(Token::Word(word));
        }
    }

    fn op(&mut self, op: &'static str) {
        self.end_word();
        self.tokens.push(Token::Op(op));
    }

    /// An unquoted character of a word.
    fn literal(&mut self, c: char) {
        let word = self.word();
        if matches!(c, '*' | '?' | '[') {
            word.leading_glob |= word.text.is_empty();
            word.glob = true;
        }
        word.text.push(c);
        self.unquoted.push(c);
    }

    /// A quoted or escaped character of a word.
    fn quoted(&mut self, c: char) {
        let word = self.word();
        word.quoted = true;
        word.text.push(c);
    }

    fn single_quoted(&mut self) {
        self.word().quoted = true;
        loop {
            match self.chars.next() {
                Some('\'') => return,
                Some(c) => self.word().text.push(c),
                None => return self.notes.unreadable.push("содержит незакрытую кавычку"),
            }
        }
    }

    fn double_quoted(&mut self) {
        self.word().quoted = true;
        loop {
            match self.chars.next() {
                Some('"') => return,
                Some('\\') => match self.chars.next() {
                    Some('\n') => {}
                    Some(c @ ('$' | '`' | '"' | '\\')) => self.word().text.push(c),
                    Some(c) => self.word().text.extend(['\\', c]),
                    None => self.word().text.push('\\'),
                },
                Some('`') => {
                    self.notes.substitutions.push("`…`");
                    let inner = self.until('`');
                    self.word().text.push_str(&format!("`{inner}`"));
                    self.notes.quoted_inner.push(inner);
                }
                Some('$') if self.chars.next_if_eq(&'(').is_some() => {
                    self.notes.substitutions.push("$(…)");
                    let inner = self.until(')');
                    self.word().text.push_str(&format!("$({inner})"));
                    self.notes.quoted_inner.push(inner);
                }
                Some('$') => self.variable(),
                Some(c) => self.word().text.push(c),
                None => return self.notes.unreadable.push("содержит незакрытую кавычку"),
            }
        }
    }

    /// The text up to `close` (nested parentheses counted for `)`), which
    /// is consumed; the rest of the line when it never comes.
    fn until(&mut self, close: char) -> String {
        let mut inner = String::new();
        let mut depth = 0usize;
        while let Some(c) = self.chars.next() {
            match c {
                '\\' => {
                    inner.push(c);
                    inner.extend(self.chars.next());
                    continue;
                }
                '(' if close == ')' => depth += 1,
                c if c == close && depth == 0 => return inner,
                ')' if close == ')' => depth -= 1,
                _ => {}
            }
            inner.push(c);
        }
        self.notes.unreadable.push("содержит незакрытую подстановку");
        inner
    }

    /// `$` outside quotes.
    fn dollar(&mut self) {
        match self.chars.peek() {
            Some('(') => {
                // The parenthesis splits: its inside is checked as commands.
                self.notes.substitutions.push("$(…)");
                self.word().text.push('$');
            }
            Some('\'') => {
                self.chars.next();
                self.notes.unreadable.push("содержит строку $'…', которую нельзя проверить заранее");
                self.word().quoted = true;
                loop {
                    match self.chars.next() {
                        Some('\'') | None => break,
                        Some('\\') => {
                            let escaped = self.chars.next();
                            self.word().text.extend(escaped);
                        }
                        Some(c) => self.word().text.push(c),
                    }
                }
            }
            // `$"…"` is the string translated: the quotes follow.
            Some('"') => {}
            _ => self.variable(),
        }
    }

    /// What follows a `$` that is no command substitution: a variable, a
    /// `${…}`, `$[…]`, or a plain dollar sign.
    fn variable(&mut self) {
        match self.chars.peek().copied() {
            Some('{') => {
                self.chars.next();
                let inner = self.until('}');
                let plain = inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    || (inner.chars().count() == 1 && inner.chars().all(|c| "@*#?$!-".contains(c)));
                if !plain || inner.is_empty() {
                    self.notes.unreadable.push("содержит подстановку ${…}, которую нельзя проверить заранее");
                }
                if inner.contains("$(") || inner.contains('`') {
                    self.notes.substitutions.push("$(…)");
                }
                let word = self.word();
                word.expands = true;
                word.text.push_str(&format!("${{{inner}}}"));
            }
            Some('[') => {
                self.notes.unreadable.push("содержит вычисление $[…], которое нельзя проверить заранее");
                self.word().text.push('$');
            }
            Some(c) if c.is_ascii_alphanumeric() || "_@*#?$!-".contains(c) => {
                let word = self.word();
                word.expands = true;
                word.text.push('$');
            }
            _ => self.word().text.push('$'),
        }
    }

    /// `<` or `>` starting a redirection: its operator, with the descriptor
    /// number before it (`2>`) dropped from the words.
    fn redirect(&mut self, first: char) {
        let descriptor = self.word.as_ref().is_some_and(|w| {
            !w.quoted && !w.expands && !w.text.is_empty() && w.text.bytes().all(|b| b.is_ascii_digit())
        });
        if descriptor {
            self.word = None;
            self.unquoted.clear();
        } else {
            self.end_word();
        }
        let op = if first == '>' {
            match self.chars.peek() {
                Some('>') => ">>",
                Some('|') => ">|",
                Some('&') => ">&",
                _ => ">",
            }
        } else {
            match self.chars.peek() {
                Some('<') => {
                    self.chars.next();
                    match self.chars.peek() {
                        Some('<') => "<<<",
                        Some('-') => "<<-",
                        _ => "<<",
                    }
                }
                Some('>') => "<>",
                Some('&') => "<&",
                _ => "<",
            }
        };
        if op.len() > 1 && op != "<<" {
            self.chars.next();
        }
        self.tokens.push(Token::Redirect(op));
    }
}

/// Whether unquoted text holds `{…,…}` or `{…..…}`.
fn has_brace_expansion(unquoted: &str) -> bool {
    let Some(open) = unquoted.find('{') else { return false };
    let rest = &unquoted[open..];
    let Some(close) = rest.rfind('}') else { return false };
    let inside = &rest[..close];
    inside.contains(',') || inside.contains("..")
}
