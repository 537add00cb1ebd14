//! Text for bank files: the SEPA Latin character set, transliteration into it, an
//! upper-case ASCII form for NACHA, and checked account-holder names.
//!
//! The SEPA set (EPC "Latin character set"): `a-z A-Z 0-9 / - ? : ( ) . , ' +` and space.
//!
//! Transliteration folds each character on its own:
//! - German umlauts and ß to their two-letter forms (`ä`→`ae`, `Ö`→`Oe`, `ß`→`ss`), the
//!   ligatures `æ`→`ae`, `œ`→`oe`, `ĳ`→`ij`, `þ`→`th`;
//! - every other Latin letter with a diacritic (Latin-1 Supplement, Latin Extended-A, the
//!   Romanian comma-below letters, the pinyin caron letters) to its base letter
//!   (`é`→`e`, `ł`→`l`, `ø`→`o`, `å`→`a`, `ő`→`o`);
//! - combining marks (decomposed input) are dropped, so `e` + U+0301 gives `e`;
//! - `&` becomes `+`, typographic apostrophes become `'`, dashes become `-`;
//! - anything else (other scripts, emoji, symbols, controls) becomes a space.
//!
//! Runs of whitespace are then collapsed to one space, the result is trimmed, cut to the
//! maximum number of characters and trimmed again.

use std::fmt;

/// Whether `c` belongs to the SEPA Latin character set.
pub fn is_sepa_char(c: char) -> bool {
    c.is_ascii_alphanumeric()
        || matches!(
            c,
            '/' | '-' | '?' | ':' | '(' | ')' | '.' | ',' | '\'' | '+' | ' '
        )
}

/// Whether every character of `s` belongs to the SEPA Latin character set.
pub fn is_sepa_text(s: &str) -> bool {
    s.chars().all(is_sepa_char)
}

/// How one input character is rendered.
enum Fold {
    /// Replaced by this text (possibly the character itself).
    Text(&'static str),
    /// Kept as is (ASCII alphanumerics and allowed punctuation).
    Same(char),
    /// Dropped without a trace (combining marks, zero-width characters).
    Drop,
    /// Becomes a word separator.
    Space,
}

/// Folds one character towards ASCII. The result is not yet restricted to a target set.
fn fold(c: char) -> Fold {
    if c.is_ascii() {
        return if c.is_ascii_graphic() {
            Fold::Same(c)
        } else {
            Fold::Space
        };
    }
    let text = match c {
        'À' | 'Á' | 'Â' | 'Ã' | 'Å' | 'Ā' | 'Ă' | 'Ą' | 'Ǎ' => "A",
        'à' | 'á' | 'â' | 'ã' | 'å' | 'ā' | 'ă' | 'ą' | 'ǎ' | 'ª' => "a",
        'Ä' | 'Æ' => "Ae",
        'ä' | 'æ' => "ae",
        'Ç' | 'Ć' | 'Ĉ' | 'Ċ' | 'Č' => "C",
        'ç' | 'ć' | 'ĉ' | 'ċ' | 'č' => "c",
        'Ð' | 'Ď' | 'Đ' => "D",
        'ð' | 'ď' | 'đ' => "d",
        'È' | 'É' | 'Ê' | 'Ë' | 'Ē' | 'Ĕ' | 'Ė' | 'Ę' | 'Ě' => "E",
        'è' | 'é' | 'ê' | 'ë' | 'ē' | 'ĕ' | 'ė' | 'ę' | 'ě' => "e",
        'Ĝ' | 'Ğ' | 'Ġ' | 'Ģ' => "G",
        'ĝ' | 'ğ' | 'ġ' | 'ģ' => "g",
        'Ĥ' | 'Ħ' => "H",
        'ĥ' | 'ħ' => "h",
        'Ì' | 'Í' | 'Î' | 'Ï' | 'Ĩ' | 'Ī' | 'Ĭ' | 'Į' | 'İ' | 'Ǐ' => "I",
        'ì' | 'í' | 'î' | 'ï' | 'ĩ' | 'ī' | 'ĭ' | 'į' | 'ı' | 'ǐ' => "i",
        'Ĳ' => "IJ",
        'ĳ' => "ij",
        'Ĵ' => "J",
        'ĵ' => "j",
        'Ķ' => "K",
        'ķ' | 'ĸ' => "k",
        'Ĺ' | 'Ļ' | 'Ľ' | 'Ŀ' | 'Ł' => "L",
        'ĺ' | 'ļ' | 'ľ' | 'ŀ' | 'ł' => "l",
        'Ñ' | 'Ń' | 'Ņ' | 'Ň' | 'Ŋ' => "N",
        'ñ' | 'ń' | 'ņ' | 'ň' | 'ŉ' | 'ŋ' => "n",
        'Ò' | 'Ó' | 'Ô' | 'Õ' | 'Ø' | 'Ō' | 'Ŏ' | 'Ő' | 'Ǒ' => "O",
        'ò' | 'ó' | 'ô' | 'õ' | 'ø' | 'ō' | 'ŏ' | 'ő' | 'ǒ' | 'º' => "o",
        'Ö' | 'Œ' => "Oe",
        'ö' | 'œ' => "oe",
        'Ŕ' | 'Ŗ' | 'Ř' => "R",
        'ŕ' | 'ŗ' | 'ř' => "r",
        'Ś' | 'Ŝ' | 'Ş' | 'Š' | 'Ș' => "S",
        'ś' | 'ŝ' | 'ş' | 'š' | 'ș' | 'ſ' => "s",
        'ß' => "ss",
        'ẞ' => "SS",
        'Ţ' | 'Ť' | 'Ŧ' | 'Ț' => "T",
        'ţ' | 'ť' | 'ŧ' | 'ț' => "t",
        'Þ' => "Th",
        'þ' => "th",
        'Ù' | 'Ú' | 'Û' | 'Ũ' | 'Ū' | 'Ŭ' | 'Ů' | 'Ű' | 'Ų' | 'Ǔ' | 'Ǖ' | 'Ǘ' | 'Ǚ' | 'Ǜ' => {
            "U"
        }
        'ù' | 'ú' | 'û' | 'ũ' | 'ū' | 'ŭ' | 'ů' | 'ű' | 'ų' | 'ǔ' | 'ǖ' | 'ǘ' | 'ǚ' | 'ǜ' => {
            "u"
        }
        'Ü' => "Ue",
        'ü' => "ue",
        'Ŵ' => "W",
        'ŵ' => "w",
        'Ý' | 'Ŷ' | 'Ÿ' => "Y",
        'ý' | 'ÿ' | 'ŷ' => "y",
        'Ź' | 'Ż' | 'Ž' => "Z",
        'ź' | 'ż' | 'ž' => "z",
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{2032}' | '\u{00B4}' => "'",
        '\u{2010}'..='\u{2015}' | '\u{2212}' => "-",
        // Combining diacritical marks and zero-width / formatting characters.
        '\u{0300}'..='\u{036F}'
        | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}'
        | '\u{2060}'..='\u{2064}'
        | '\u{FEFF}'
        | '\u{00AD}' => return Fold::Drop,
        _ => return Fold::Space,
    };
    Fold::Text(text)
}

/// Accumulates output characters, collapsing runs of spaces and dropping leading ones.
struct Collapser {
    out: String,
    chars: usize,
    pending_space: bool,
}

impl Collapser {
    fn push(&mut self, c: char) {
        if c == ' ' {
            self.pending_space = self.chars > 0;
            return;
        }
        if self.pending_space {
            self.out.push(' ');
            self.chars += 1;
            self.pending_space = false;
        }
        self.out.push(c);
        self.chars += 1;
    }
}

/// Folds `input` character by character, keeps what `map` accepts (as `map` returns it),
/// turns the rest into spaces, collapses whitespace and cuts to `max_chars`.
fn render(input: &str, max_chars: usize, map: impl Fn(char) -> Option<char>) -> String {
    let mut acc = Collapser {
        out: String::with_capacity(input.len().min(max_chars.saturating_mul(2))),
        chars: 0,
        pending_space: false,
    };
    for c in input.chars() {
        if acc.chars >= max_chars {
            break;
        }
        match fold(c) {
            Fold::Drop => {}
            Fold::Space => acc.push(' '),
            Fold::Same(c) => acc.push(map(c).unwrap_or(' ')),
            Fold::Text(t) => t.chars().for_each(|c| acc.push(map(c).unwrap_or(' '))),
        }
    }
    let mut out = acc.out;
    // A multi-letter fold may have pushed past the limit: cut on a character boundary,
    // then drop a trailing space left by the cut.
    if let Some((idx, _)) = out.char_indices().nth(max_chars) {
        out.truncate(idx);
    }
    let trimmed_len = out.trim_end().len();
    out.truncate(trimmed_len);
    out
}

/// Transliterates `input` into the SEPA Latin character set (see the module docs) and cuts
/// it to at most `max_chars` characters. The result may be empty.
///
/// ```
/// use settle_bank::to_sepa_latin;
/// assert_eq!(to_sepa_latin("Müller & Söhne GmbH", 70), "Mueller + Soehne GmbH");
/// assert_eq!(to_sepa_latin("Straße", 70), "Strasse");
/// ```
pub fn to_sepa_latin(input: &str, max_chars: usize) -> String {
    render(input, max_chars, |c| {
        let c = if c == '&' { '+' } else { c };
        is_sepa_char(c).then_some(c)
    })
}

/// Transliterates `input` into upper-case printable ASCII for NACHA alphameric fields and
/// cuts it to at most `max_chars` characters. Same folding as [`to_sepa_latin`], except
/// that all printable ASCII punctuation (including `&`) is kept. The result may be empty.
pub fn to_nacha_ascii(input: &str, max_chars: usize) -> String {
    render(input, max_chars, |c| {
        (c.is_ascii_graphic() || c == ' ').then_some(c.to_ascii_uppercase())
    })
}

/// The longest account holder name accepted (the SEPA limit for names).
pub const HOLDER_NAME_CHARS_MAX: usize = 70;

/// Why a string is not an acceptable account holder name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HolderNameError {
    /// Nothing left after trimming.
    #[error("holder name is empty")]
    Empty,
    /// More than [`HOLDER_NAME_CHARS_MAX`] characters after trimming.
    #[error("holder name has {chars} characters, at most 70 are allowed")]
    TooLong {
        /// Characters found (after trimming).
        chars: usize,
    },
    /// Contains a control or invisible formatting character (line breaks, tabs,
    /// bidirectional overrides, zero-width characters).
    #[error("holder name contains a control or invisible character")]
    ControlCharacter,
    /// Nothing readable survives transliteration into the SEPA Latin set (for example a
    /// name written only in a non-Latin script or emoji); banks need a Latin spelling.
    #[error("holder name has no letters or digits in Latin script")]
    NotLatin,
}

impl HolderNameError {
    /// Stable machine-readable code (one code for all holder-name problems; the message
    /// says which).
    pub fn code(&self) -> &'static str {
        "invalid_holder_name"
    }
}

/// The name of a bank account holder, as the provider typed it (trimmed), UTF-8.
///
/// Guarantees: 1 to 70 characters, no control or invisible formatting characters, and at
/// least one letter or digit survives transliteration, so the SEPA and NACHA renderings
/// are never empty.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HolderName(String);

impl HolderName {
    /// Parses a holder name.
    ///
    /// # Errors
    /// [`HolderNameError`] (code `invalid_holder_name`).
    pub fn parse(input: &str) -> Result<Self, HolderNameError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(HolderNameError::Empty);
        }
        if s.chars().any(is_control_or_invisible) {
            return Err(HolderNameError::ControlCharacter);
        }
        let chars = s.chars().count();
        if chars > HOLDER_NAME_CHARS_MAX {
            return Err(HolderNameError::TooLong { chars });
        }
        if !to_sepa_latin(s, usize::MAX)
            .chars()
            .any(|c| c.is_ascii_alphanumeric())
        {
            return Err(HolderNameError::NotLatin);
        }
        Ok(Self(s.to_owned()))
    }

    /// The name as entered (trimmed).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The name in the SEPA Latin set, at most `max_chars` characters.
    pub fn to_sepa_latin(&self, max_chars: usize) -> String {
        to_sepa_latin(&self.0, max_chars)
    }
}

impl fmt::Display for HolderName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Control characters and invisible formatting characters that have no place in a name.
fn is_control_or_invisible(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{200B}'..='\u{200F}'
                | '\u{202A}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{2069}'
                | '\u{FEFF}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folds() {
        assert_eq!(to_sepa_latin("  a\t\tb  ", 10), "a b");
        assert_eq!(to_sepa_latin("Ärger", 2), "Ae");
        assert_eq!(to_sepa_latin("Ärger", 1), "A");
        assert_eq!(to_sepa_latin("ab cd", 3), "ab");
        assert_eq!(to_sepa_latin("e\u{301}", 3), "e");
        assert_eq!(to_sepa_latin("💸💸", 3), "");
        assert_eq!(to_nacha_ascii("Müller & Söhne", 22), "MUELLER & SOEHNE");
        assert_eq!(to_sepa_latin("x", 0), "");
    }
}
