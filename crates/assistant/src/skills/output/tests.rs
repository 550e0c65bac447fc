use super::*;

#[test]
fn each_cleaning_rule() {
    let cases: &[(&str, &str, &str)] = &[
        ("plain output stays", " M server/skills.js\n?? new-file.txt", " M server/skills.js\n?? new-file.txt"),
        ("ANSI colours", "\x1b[32m M\x1b[0m file.rs\n\x1b[1;31merror\x1b[m", " M file.rs\nerror"),
        ("8-bit CSI and cursor moves", "\u{9b}2Kdone\x1b[2A\x1b[?25h", "done"),
        ("OSC window title", "\x1b]0;user@host: ~\x07ready\x1b]8;;http://x\x1b\\link", "readylink"),
        ("charset selection", "\x1b(Bok", "ok"),
        ("other controls", "a\u{0}b\u{8}c\td", "abc\td"),
        ("CRLF", "one\r\ntwo\r\n", "one\ntwo"),
        ("progress redraw", "10%\r50%\r100%\ndone", "100%\ndone"),
        ("Windows prompt", "C:\\Users\\me>git status\nclean\nC:\\Users\\me>", "clean"),
        ("PowerShell prompt", "PS C:\\repo> git status\nclean", "clean"),
        ("Linux prompt", "me@box:~/repo$ git status\nclean\nroot@box:/# ", "clean"),
        ("bracketed prompt", "[me@box repo]$ ls\nfile", "file"),
        (
            "Windows banner",
            "Microsoft Windows [Version 10.0.19045.3803]\n(c) Microsoft Corporation. All rights reserved.\n\nC:\\>dir\nfile",
            "file",
        ),
        (
            "Russian Windows banner",
            "Microsoft Windows [Version 10.0.19045]\n(c) Корпорация Майкрософт (Microsoft Corporation). Все права защищены.\nok",
            "ok",
        ),
        (
            "PowerShell banner",
            "Windows PowerShell\nCopyright (C) Microsoft Corporation. All rights reserved.\n\nTry the new cross-platform PowerShell https://aka.ms/pscore6\nok",
            "ok",
        ),
        ("blank lines", "\n\na\n   \n\t\nb\n\n", "a\nb"),
        ("repeated lines", "a\na\na\nb\na", "a\nb\na"),
        ("repeats after cleaning", "x\n\x1b[0mx\nx  ", "x"),
        ("trailing spaces", "a   \n  b  ", "a\n  b"),
        ("a dollar inside text is no prompt", "cost: 5$\nuser@example.com wrote", "cost: 5$\nuser@example.com wrote"),
        ("unterminated escape", "ok\x1b[", "ok"),
        ("empty", "", ""),
    ];
    for (rule, raw, expected) in cases {
        assert_eq!(clean(raw, DEFAULT_MAX_BYTES), *expected, "{rule}");
    }
}

#[test]
fn the_cap_cuts_at_a_char_boundary_and_says_so() {
    let raw: String = (0..1000).map(|i| format!("строка {i}\n")).collect();
    for max in [0, 5, CUT_NOTE.len(), CUT_NOTE.len() + 1, 100, 1001, DEFAULT_MAX_BYTES] {
        let out = clean(&raw, max);
        assert!(out.len() <= max, "{max}: {}", out.len());
        if max > CUT_NOTE.len() {
            assert!(out.ends_with(CUT_NOTE), "{max}: {out:?}");
        }
    }
    let out = clean(&raw, 100);
    assert!(out.starts_with("строка 0\nстрока 1\n"));
    // One long line, cut in the middle of a two-byte char.
    let out = clean(&"я".repeat(100), 51);
    assert!(out.len() <= 51);
    assert!(out.ends_with(CUT_NOTE));
    // The line cut in the middle neither turns blank nor repeats the one before.
    assert_eq!(clean(&format!("ab\n   {}", "x".repeat(100)), 28), format!("ab\n{CUT_NOTE}"));
    assert_eq!(clean(&format!("ab\nab{}", "x".repeat(100)), 28), format!("ab\n{CUT_NOTE}"));
    assert_eq!(clean(&format!("{CUT_NOTE}\n        {}", "x".repeat(100)), 50), CUT_NOTE);
    // The start of a line that does not fit is kept, up to the cap.
    let json = format!("{{\"items\": [{}]}}", "1,".repeat(100));
    let out = clean(&format!("total 1\n{json}"), 64);
    assert_eq!(out, format!("total 1\n{}\n{CUT_NOTE}", &json[..64 - 8 - 1 - CUT_NOTE.len()]));
    // What fits is not cut.
    assert_eq!(clean("short", 5), "short");
}
