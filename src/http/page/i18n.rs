//! The dashboard's languages: English, German and Chinese (Simplified). Labels come from
//! the plain files in `i18n/` (one per language, same keys, edited by translators);
//! numbers and dates are formatted here, exactly: money is never rounded for display.
//!
//! One precision per quantity on the whole page: USDC always with its six decimals,
//! EUR with two, GPU hours with three, percentages with two. USDC's own unit is the
//! micro-USDC (the mint's six decimals, the ledger's and the API's integer): six fixed
//! decimals show every amount exactly, equal digit for digit to the API's decimal in
//! `<data value>` and to what arrives on chain, and amounts side by side line up. Two
//! decimals would round (a card's net plus fee would not add up to its gross), and
//! trimming trailing zeros gave one card `5.976` beside `7.47`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use chrono::{DateTime, Datelike, NaiveDate, Timelike};

/// A language of the dashboard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    En,
    De,
    Zh,
}

const FILES: [(Lang, &str); 3] = [
    (Lang::En, include_str!("i18n/en.toml")),
    (Lang::De, include_str!("i18n/de.toml")),
    (Lang::Zh, include_str!("i18n/zh-CN.toml")),
];

const MONTHS_EN: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];
const MONTHS_EN_LONG: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const MONTHS_DE_LONG: [&str; 12] = [
    "Januar",
    "Februar",
    "März",
    "April",
    "Mai",
    "Juni",
    "Juli",
    "August",
    "September",
    "Oktober",
    "November",
    "Dezember",
];

impl Lang {
    pub const ALL: [Lang; 3] = [Lang::En, Lang::De, Lang::Zh];

    /// The BCP 47 tag (`lang` attribute, cookie and `?lang=` value).
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::De => "de",
            Lang::Zh => "zh-CN",
        }
    }

    /// A tag of `?lang=`, the cookie or `Accept-Language` (`de-AT` is German, `zh-Hans`
    /// Chinese); `None` for a language the dashboard does not speak.
    pub fn parse(tag: &str) -> Option<Lang> {
        let primary = tag.trim().split(['-', '_']).next()?.to_ascii_lowercase();
        match primary.as_str() {
            "en" => Some(Lang::En),
            "de" => Some(Lang::De),
            "zh" => Some(Lang::Zh),
            _ => None,
        }
    }

    /// The best language of an `Accept-Language` header (by q-value, then order);
    /// English when it names none the dashboard speaks.
    pub(crate) fn negotiate(accept_language: Option<&str>) -> Lang {
        let mut best: Option<(u32, Lang)> = None;
        for item in accept_language.unwrap_or("").split(',') {
            let mut parts = item.split(';');
            let Some(lang) = parts.next().and_then(Lang::parse) else {
                continue;
            };
            let q = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .map_or(1000, parse_q);
            if q > 0 && best.is_none_or(|(bq, _)| q > bq) {
                best = Some((q, lang));
            }
        }
        best.map_or(Lang::En, |(_, lang)| lang)
    }

    fn messages(self) -> &'static BTreeMap<String, String> {
        static LOADED: OnceLock<Vec<(Lang, BTreeMap<String, String>)>> = OnceLock::new();
        let all = LOADED.get_or_init(|| {
            FILES
                .iter()
                // The files are part of the binary and checked by a test: a broken one is a
                // build defect, not an input error.
                .map(|(lang, text)| (*lang, toml::from_str(text).expect("a valid i18n file")))
                .collect()
        });
        &all.iter()
            .find(|(l, _)| *l == self)
            .expect("every language")
            .1
    }

    /// The label `key`; the English one if this language lacks it, else the key itself.
    pub fn t(self, key: &str) -> &'static str {
        self.messages()
            .get(key)
            .or_else(|| Lang::En.messages().get(key))
            .map_or("", String::as_str)
    }

    /// The label `key` with its `{name}` placeholders filled.
    pub(crate) fn tf(self, key: &str, args: &[(&str, &str)]) -> String {
        let mut text = self.t(key).to_owned();
        for (name, value) in args {
            text = text.replace(&format!("{{{name}}}"), value);
        }
        text
    }

    fn separators(self) -> (char, char) {
        match self {
            Lang::De => ('.', ','),
            Lang::En | Lang::Zh => (',', '.'),
        }
    }

    /// An exact decimal of `scale` fractional digits (`123456` at scale 6 is 0.123456) in
    /// this language's separators, always with all `scale` fractional digits (one width per
    /// quantity, see the module doc): `1.234,560000` (German), `1,234.560000` (English,
    /// Chinese) at scale 6.
    pub fn decimal(self, units: i64, scale: u32) -> String {
        self.digits(units, scale, scale as usize)
    }

    /// A measurement (not money) of `scale` fractional digits, its trailing zeros dropped:
    /// `95,5` TFLOPS, `3.350` GB/s in German.
    pub fn number(self, units: i64, scale: u32) -> String {
        self.digits(units, scale, 0)
    }

    /// `units` at `scale`, keeping at least `min_fraction` fractional digits.
    fn digits(self, units: i64, scale: u32, min_fraction: usize) -> String {
        let (group, point) = self.separators();
        let unit = 10u64.pow(scale);
        let magnitude = units.unsigned_abs();
        let whole = (magnitude / unit).to_string();
        let mut fraction = format!("{:0width$}", magnitude % unit, width = scale as usize);
        while fraction.len() > min_fraction && fraction.ends_with('0') {
            fraction.pop();
        }
        let mut out = String::new();
        if units < 0 {
            out.push('-');
        }
        for (i, c) in whole.chars().enumerate() {
            if i > 0 && (whole.len() - i).is_multiple_of(3) {
                out.push(group);
            }
            out.push(c);
        }
        if !fraction.is_empty() {
            out.push(point);
            out.push_str(&fraction);
        }
        out
    }

    /// Micro-USDC as `1,234.560000 USDC` / `1.234,560000 USDC`: always six decimals.
    pub fn usdc(self, micro_usdc: i64) -> String {
        format!("{} USDC", self.decimal(micro_usdc, 6))
    }

    /// GPU time as hours with three decimals: `12.500`, `12,500`.
    pub fn hours(self, usage_ms: i64) -> String {
        // 1 hour = 3,600,000 ms: 1 ms = 1/3.6 micro-hours is not exact in decimals, so the
        // hours are shown to the 1/1000 of a hour, rounded half to even once.
        let milli_hours = crate::domain::money::div_round_half_even(i128::from(usage_ms), 3_600);
        self.decimal(milli_hours as i64, 3)
    }

    /// Basis points as a percentage with two decimals: `91.21%`, `91,21 %`, `91.21%`.
    pub fn percent(self, bps: u16) -> String {
        self.percent_sign(self.decimal(i64::from(bps), 2))
    }

    /// A published share (a weight of the score), its trailing zeros dropped: `50%`,
    /// `50 %`.
    pub fn share(self, bps: u16) -> String {
        self.percent_sign(self.number(i64::from(bps), 2))
    }

    fn percent_sign(self, value: String) -> String {
        match self {
            Lang::De => format!("{value} %"),
            Lang::En | Lang::Zh => format!("{value}%"),
        }
    }

    /// A duration in whole minutes (seconds under a minute): `3 h 10 min`, `3 Std. 10 Min.`,
    /// `3 小时 10 分钟`; the units are labels of the i18n files.
    pub fn duration(self, ms: i64) -> String {
        let (hours, minutes) = (ms / 3_600_000, ms % 3_600_000 / 60_000);
        let (h, m, s) = (self.t("unit_h"), self.t("unit_min"), self.t("unit_s"));
        match (hours, minutes) {
            (0, 0) => format!("{} {s}", ms / 1000),
            (0, m_) => format!("{m_} {m}"),
            (h_, 0) => format!("{h_} {h}"),
            (h_, m_) => format!("{h_} {h} {m_} {m}"),
        }
    }

    /// A calendar date: `Nov 30, 2026`, `30.11.2026`, `2026年11月30日`.
    pub fn date(self, d: NaiveDate) -> String {
        match self {
            Lang::En => format!(
                "{} {}, {}",
                MONTHS_EN[d.month0() as usize],
                d.day(),
                d.year()
            ),
            Lang::De => format!("{:02}.{:02}.{}", d.day(), d.month(), d.year()),
            Lang::Zh => format!("{}年{}月{}日", d.year(), d.month(), d.day()),
        }
    }

    /// A date without its year, for chart axes: `Nov 30`, `30.11.`, `11月30日`.
    pub(crate) fn short_date(self, d: NaiveDate) -> String {
        match self {
            Lang::En => format!("{} {}", MONTHS_EN[d.month0() as usize], d.day()),
            Lang::De => format!("{:02}.{:02}.", d.day(), d.month()),
            Lang::Zh => format!("{}月{}日", d.month(), d.day()),
        }
    }

    /// A month: `November 2026`, `November 2026`, `2026年11月`.
    pub fn month(self, year: i32, month: u32) -> String {
        let i = (month.clamp(1, 12) - 1) as usize;
        match self {
            Lang::En => format!("{} {year}", MONTHS_EN_LONG[i]),
            Lang::De => format!("{} {year}", MONTHS_DE_LONG[i]),
            Lang::Zh => format!("{year}年{month}月"),
        }
    }

    /// An instant (milliseconds since the epoch), UTC: its date, then `HH:MM UTC`.
    pub(crate) fn date_time(self, ms: i64) -> String {
        let Some(t) = DateTime::from_timestamp_millis(ms) else {
            return String::new();
        };
        format!(
            "{} {:02}:{:02} UTC",
            self.date(t.date_naive()),
            t.hour(),
            t.minute()
        )
    }

    /// The date of an instant (milliseconds since the epoch), UTC.
    pub(crate) fn date_of_ms(self, ms: i64) -> String {
        self.date(crate::domain::time::date_of_ms(ms))
    }
}

/// A q-value (`0.8`) in thousandths; malformed ones count as 0 (not acceptable).
fn parse_q(text: &str) -> u32 {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let whole: u32 = match whole {
        "0" => 0,
        "1" => 1000,
        _ => return 0,
    };
    if fraction.len() > 3 || !fraction.chars().all(|c| c.is_ascii_digit()) {
        return 0;
    }
    let digits = format!("{fraction:0<3}");
    (whole + digits.parse::<u32>().unwrap_or(0)).min(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(lang: Lang) -> Vec<&'static String> {
        lang.messages().keys().collect()
    }

    fn placeholders(text: &str) -> Vec<&str> {
        let mut out: Vec<&str> = text
            .split('{')
            .skip(1)
            .filter_map(|s| s.split_once('}').map(|(name, _)| name))
            .collect();
        out.sort_unstable();
        out
    }

    #[test]
    fn every_language_has_every_label_with_the_same_placeholders() {
        let english = keys(Lang::En);
        assert!(english.len() > 50);
        for lang in [Lang::De, Lang::Zh] {
            assert_eq!(keys(lang), english, "{lang:?} has other keys than English");
            for key in &english {
                let (en, other) = (Lang::En.t(key), lang.t(key));
                assert!(!other.trim().is_empty(), "{lang:?} {key} is empty");
                assert_eq!(placeholders(other), placeholders(en), "{lang:?} {key}");
            }
        }
        assert_eq!(Lang::De.t("sign_out"), "Abmelden");
        assert_eq!(Lang::Zh.t("sign_out"), "退出登录");
    }

    #[test]
    fn money_is_shown_exactly_in_each_languages_format() {
        assert_eq!(Lang::De.usdc(1_234_560_000), "1.234,560000 USDC");
        assert_eq!(Lang::En.usdc(1_234_560_000), "1,234.560000 USDC");
        assert_eq!(Lang::Zh.usdc(1_234_560_000), "1,234.560000 USDC");
        assert_eq!(Lang::En.usdc(1_234_567_891), "1,234.567891 USDC");
        assert_eq!(Lang::De.usdc(-5), "-0,000005 USDC");
        assert_eq!(Lang::En.usdc(0), "0.000000 USDC");
        assert_eq!(Lang::En.usdc(999_999_000_000), "999,999.000000 USDC");
        assert_eq!(Lang::De.usdc(1_000_000_000_000), "1.000.000,000000 USDC");
        assert_eq!(Lang::En.usdc(i64::MIN), "-9,223,372,036,854.775808 USDC");
        assert_eq!(Lang::En.hours(5_400_000), "1.500");
        assert_eq!(Lang::De.hours(3_600_000 * 1234 + 1_800), "1.234,000");
        assert_eq!(Lang::De.hours(5_400), "0,002");
        assert_eq!(Lang::De.decimal(12_345, 2), "123,45");
        assert_eq!(Lang::De.number(95_500, 3), "95,5");
        assert_eq!(Lang::En.number(3_350, 0), "3,350");
        assert_eq!(Lang::De.percent(9_121), "91,21 %");
        assert_eq!(Lang::Zh.percent(10_000), "100.00%");
    }

    /// One precision per quantity: the amounts the issue showed side by side in one card
    /// (5.976 beside 7.47) have the same number of decimals.
    #[test]
    fn amounts_side_by_side_have_one_number_of_decimals() {
        for lang in Lang::ALL {
            let decimals = |micro: i64| {
                let text = lang.usdc(micro);
                let point = if lang == Lang::De { ',' } else { '.' };
                let number = text.trim_end_matches(" USDC");
                number.len() - number.rfind(point).expect("a decimal point") - 1
            };
            for micro in [5_976_000, 7_470_000, 1_494_000, 0, 12_000_000, 1] {
                assert_eq!(decimals(micro), 6, "{lang:?} {}", lang.usdc(micro));
            }
        }
    }

    #[test]
    fn durations_are_shown_in_each_language() {
        let ms = 3 * 3_600_000 + 10 * 60_000;
        assert_eq!(Lang::En.duration(ms), "3 h 10 min");
        assert_eq!(Lang::De.duration(ms), "3 Std. 10 Min.");
        assert_eq!(Lang::Zh.duration(ms), "3 小时 10 分钟");
        assert_eq!(Lang::En.duration(40_000), "40 s");
        assert_eq!(Lang::De.duration(7_200_000), "2 Std.");
    }

    #[test]
    fn dates_are_shown_in_each_languages_format() {
        let d = NaiveDate::from_ymd_opt(2026, 11, 30).unwrap();
        assert_eq!(Lang::Zh.date(d), "2026年11月30日");
        assert_eq!(Lang::De.date(d), "30.11.2026");
        assert_eq!(Lang::En.date(d), "Nov 30, 2026");
        assert_eq!(Lang::De.month(2026, 3), "März 2026");
        assert_eq!(Lang::Zh.month(2026, 3), "2026年3月");
        let ms = 1_796_083_200_000 + 13 * 3_600_000 + 5 * 60_000; // 2026-12-01 13:05 UTC
        assert_eq!(Lang::De.date_time(ms), "01.12.2026 13:05 UTC");
        assert_eq!(Lang::Zh.date_time(ms), "2026年12月1日 13:05 UTC");
    }

    #[test]
    fn the_language_follows_accept_language() {
        assert_eq!(Lang::negotiate(Some("de-DE,de;q=0.9,en;q=0.8")), Lang::De);
        assert_eq!(
            Lang::negotiate(Some("fr-FR, zh-CN;q=0.7, en;q=0.5")),
            Lang::Zh
        );
        assert_eq!(Lang::negotiate(Some("en;q=0.5, de;q=0.9")), Lang::De);
        assert_eq!(Lang::negotiate(Some("de;q=0, en;q=0.1")), Lang::En);
        assert_eq!(Lang::negotiate(Some("fr, it")), Lang::En);
        assert_eq!(Lang::negotiate(None), Lang::En);
        assert_eq!(Lang::negotiate(Some("zh-Hans-CN;q=bogus, de")), Lang::De);
        assert_eq!(Lang::parse("zh_TW"), Some(Lang::Zh));
        assert_eq!(Lang::parse("xx"), None);
    }
}
