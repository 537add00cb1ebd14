//! A streaming layer over quick-xml's pull reader, shared by the ISO 20022 readers.
//!
//! Why the pull reader and not serde: the readers must name the exact element where a
//! file goes wrong (`…/Ntfctn[1]/Ntry[3]/Amt`), accept any namespace prefix and unknown
//! elements, and keep memory proportional to one entry, not to the file (a notification
//! can carry 100,000 entries). With the pull reader, elements are matched by local name
//! (prefixes and namespaces ignored), the path is known at every step, and only one
//! "record" at a time (a `Ntry`, a `TxInfAndSts`, a `CdtTrfTxInf`) is built into a small
//! [`Element`] tree; headers are seen as leaf texts as they stream by.
//!
//! A [`Visitor`] says which elements are records and receives, for every element at or
//! below the message element (`BkToCstmrStmt`, `CstmrPmtStsRpt`, …): `Open` when it starts,
//! `Leaf` with its trimmed text when it ends without child elements, `Close` when it ends
//! with some, or `Record` with the whole subtree. Anything outside the message element
//! (an envelope, an application header) is skipped.

use quick_xml::Reader;
use quick_xml::XmlVersion;
use quick_xml::escape::resolve_predefined_entity;
use quick_xml::events::{BytesRef, BytesStart, Event};

use crate::answers::{ANSWER_XML_DEPTH_MAX, AnswerError, AnswerLocation};

/// Elements that repeat among their siblings; their paths carry a 1-based index.
const REPEATING: &[&str] = &[
    "Ntfctn",
    "Stmt",
    "Rpt",
    "Ntry",
    "NtryDtls",
    "TxDtls",
    "Bal",
    "OrgnlPmtInfAndSts",
    "TxInfAndSts",
    "StsRsnInf",
    "AddtlInf",
    "PmtInf",
    "CdtTrfTxInf",
];

/// One element of a record, read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Element {
    /// Local name (prefix dropped).
    pub(crate) name: String,
    /// Path from the document root, for errors.
    pub(crate) path: String,
    /// Attributes by local name (namespace declarations dropped), values unescaped.
    pub(crate) attrs: Vec<(String, String)>,
    /// Trimmed text, for elements without child elements.
    pub(crate) text: String,
    /// Child elements in document order.
    pub(crate) children: Vec<Element>,
}

impl Element {
    /// The first child with this local name.
    pub(crate) fn child(&self, name: &str) -> Option<&Element> {
        self.children.iter().find(|c| c.name == name)
    }

    /// All children with this local name.
    pub(crate) fn children_named<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = &'a Element> + 'a {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The first descendant along `path` (local names).
    pub(crate) fn find(&self, path: &[&str]) -> Option<&Element> {
        path.iter().try_fold(self, |el, name| el.child(name))
    }

    /// The non-empty text of the descendant along `path`.
    pub(crate) fn text_at(&self, path: &[&str]) -> Option<&str> {
        self.find(path)
            .map(|e| e.text.as_str())
            .filter(|t| !t.is_empty())
    }

    /// An attribute by local name.
    pub(crate) fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The path of a (possibly missing) descendant, for errors: `self.path` + `/rel`.
    pub(crate) fn path_of(&self, rel: &str) -> String {
        format!("{}/{rel}", self.path)
    }

    /// Where this element is.
    pub(crate) fn at(&self) -> AnswerLocation {
        AnswerLocation::Path(self.path.clone())
    }
}

/// What the walk hands to the [`Visitor`].
pub(crate) enum Item<'e> {
    /// An element below (or at) the message element started.
    Open,
    /// An element without child elements ended: its trimmed text.
    Leaf { text: &'e str },
    /// An element with child elements ended.
    Close,
    /// A record element, read whole.
    Record(Element),
}

/// An open element.
struct Frame {
    name: String,
    index: usize,
    /// Children seen so far, by name (for sibling indexes).
    counts: Vec<(String, usize)>,
    text: String,
    has_children: bool,
}

/// Where the walk is: the open elements, and which of them is the message element.
pub(crate) struct Cursor<'f> {
    frames: &'f [Frame],
    message: usize,
}

impl Cursor<'_> {
    /// Whether the elements below the message element are exactly `rel` (local names);
    /// `&[]` is the message element itself.
    pub(crate) fn is(&self, rel: &[&str]) -> bool {
        let below = &self.frames[self.message + 1..];
        below.len() == rel.len() && below.iter().zip(rel).all(|(f, n)| f.name == *n)
    }

    /// The path of the innermost open element.
    pub(crate) fn path(&self) -> String {
        path_of(self.frames)
    }

    /// [`Cursor::path`] as a location.
    pub(crate) fn at(&self) -> AnswerLocation {
        AnswerLocation::Path(self.path())
    }
}

/// Receives the message element's content.
pub(crate) trait Visitor {
    /// Whether the element `name` starting inside the element at `parent` is read whole.
    fn is_record(&self, parent: &Cursor<'_>, name: &str) -> bool;

    /// One step of the walk; `at` is the element concerned (for `Record`, its parent).
    fn visit(&mut self, at: &Cursor<'_>, item: Item<'_>) -> Result<(), AnswerError>;
}

/// One path segment: `name`, or `name[index]` for repeating elements.
fn segment(name: &str, index: usize) -> String {
    if REPEATING.contains(&name) {
        format!("{name}[{index}]")
    } else {
        name.to_owned()
    }
}

fn path_of(frames: &[Frame]) -> String {
    let mut out = String::new();
    for f in frames {
        if !out.is_empty() {
            out.push('/');
        }
        out.push_str(&segment(&f.name, f.index));
    }
    out
}

/// Counts one more child named `name`; its 1-based index among same-named siblings.
fn next_index(counts: &mut Vec<(String, usize)>, name: &str) -> usize {
    match counts.iter_mut().find(|(n, _)| n == name) {
        Some((_, c)) => {
            *c += 1;
            *c
        }
        None => {
            counts.push((name.to_owned(), 1));
            1
        }
    }
}

/// The 1-based line of a byte offset.
fn line_of(xml: &str, offset: u64) -> usize {
    let end = usize::try_from(offset).unwrap_or(usize::MAX).min(xml.len());
    xml.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

fn malformed(xml: &str, at: AnswerLocation, offset: u64, what: &str) -> AnswerError {
    AnswerError::MalformedXml {
        at,
        detail: format!("{what} (line {})", line_of(xml, offset)),
    }
}

/// The text an entity or character reference stands for.
fn resolve(r: &BytesRef<'_>) -> Option<String> {
    if let Ok(Some(c)) = r.resolve_char_ref() {
        return Some(c.to_string());
    }
    resolve_predefined_entity(&r.xml10_content()).map(str::to_owned)
}

/// Attributes by local name, without namespace declarations.
fn attributes(start: &BytesStart<'_>) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for attr in start.attributes() {
        let attr = attr.map_err(|e| e.to_string())?;
        let key = attr.key.as_ref();
        if key == "xmlns" || key.starts_with("xmlns:") {
            continue;
        }
        let value = attr
            .normalized_value(XmlVersion::Implicit1_0)
            .map_err(|e| e.to_string())?;
        out.push((
            attr.key.local_name().as_ref().to_owned(),
            value.into_owned(),
        ));
    }
    Ok(out)
}

/// The walk's state.
struct Walker<'x> {
    xml: &'x str,
    reader: Reader<&'x [u8]>,
    frames: Vec<Frame>,
    top_counts: Vec<(String, usize)>,
    /// Index in `frames` of the message element, once found.
    message: Option<usize>,
    /// The message element has ended.
    done: bool,
}

impl<'x> Walker<'x> {
    fn inside(&self) -> bool {
        !self.done && self.message.is_some_and(|m| self.frames.len() > m)
    }

    fn here(&self) -> AnswerLocation {
        AnswerLocation::Path(path_of(&self.frames))
    }

    fn error(&self, offset: u64, what: &str) -> AnswerError {
        malformed(self.xml, self.here(), offset, what)
    }

    fn next_event(&mut self) -> Result<Event<'x>, AnswerError> {
        self.reader.read_event().map_err(|e| {
            let offset = self.reader.error_position();
            malformed(
                self.xml,
                AnswerLocation::Path(path_of(&self.frames)),
                offset,
                &e.to_string(),
            )
        })
    }

    fn add_text(&mut self, text: &str) {
        if let Some(f) = self.frames.last_mut()
            && !f.has_children
            && !self.done
        {
            f.text.push_str(text);
        }
    }

    fn start(
        &mut self,
        start: &BytesStart<'x>,
        empty: bool,
        messages: &[&str],
        v: &mut impl Visitor,
    ) -> Result<(), AnswerError> {
        let name = start.local_name().as_ref().to_owned();
        if self.frames.len() >= ANSWER_XML_DEPTH_MAX {
            return Err(AnswerError::TooDeep { at: self.here() });
        }
        let index = match self.frames.last_mut() {
            Some(parent) => {
                parent.has_children = true;
                parent.text.clear();
                next_index(&mut parent.counts, &name)
            }
            None => next_index(&mut self.top_counts, &name),
        };
        if self.message.is_none() && messages.contains(&name.as_str()) {
            self.message = Some(self.frames.len());
        }
        if let Some(message) = self.message.filter(|_| self.inside()) {
            let parent = Cursor {
                frames: &self.frames,
                message,
            };
            if v.is_record(&parent, &name) {
                let path = format!("{}/{}", parent.path(), segment(&name, index));
                let record = read_record(self, start, name, path, empty, self.frames.len())?;
                let parent = Cursor {
                    frames: &self.frames,
                    message,
                };
                return v.visit(&parent, Item::Record(record));
            }
        }
        self.frames.push(Frame {
            name,
            index,
            counts: Vec::new(),
            text: String::new(),
            has_children: false,
        });
        if let Some(message) = self.message.filter(|_| self.inside()) {
            let at = Cursor {
                frames: &self.frames,
                message,
            };
            v.visit(&at, Item::Open)?;
        }
        if empty { self.end(v) } else { Ok(()) }
    }

    fn end(&mut self, v: &mut impl Visitor) -> Result<(), AnswerError> {
        if self.inside()
            && let Some(message) = self.message
        {
            let at = Cursor {
                frames: &self.frames,
                message,
            };
            match self.frames.last() {
                Some(f) if !f.has_children => v.visit(
                    &at,
                    Item::Leaf {
                        text: f.text.trim(),
                    },
                )?,
                _ => v.visit(&at, Item::Close)?,
            }
        }
        self.frames.pop();
        if self.message.is_some_and(|m| self.frames.len() == m) {
            self.done = true;
        }
        Ok(())
    }
}

/// Reads the element that `start` opened, whole (its end included).
fn read_record<'x>(
    w: &mut Walker<'x>,
    start: &BytesStart<'x>,
    name: String,
    path: String,
    empty: bool,
    depth: usize,
) -> Result<Element, AnswerError> {
    if depth >= ANSWER_XML_DEPTH_MAX {
        return Err(AnswerError::TooDeep {
            at: AnswerLocation::Path(path),
        });
    }
    let attrs = attributes(start).map_err(|e| {
        malformed(
            w.xml,
            AnswerLocation::Path(path.clone()),
            w.reader.buffer_position(),
            &e,
        )
    })?;
    let mut el = Element {
        name,
        path,
        attrs,
        text: String::new(),
        children: Vec::new(),
    };
    if empty {
        return Ok(el);
    }
    let mut counts = Vec::new();
    loop {
        let event = w
            .reader
            .read_event()
            .map_err(|e| malformed(w.xml, el.at(), w.reader.error_position(), &e.to_string()))?;
        let is_empty = matches!(event, Event::Empty(_));
        match event {
            Event::Start(s) | Event::Empty(s) => {
                let child_name = s.local_name().as_ref().to_owned();
                let index = next_index(&mut counts, &child_name);
                let child_path = format!("{}/{}", el.path, segment(&child_name, index));
                let child = read_record(w, &s, child_name, child_path, is_empty, depth + 1)?;
                el.text.clear();
                el.children.push(child);
            }
            Event::End(_) => break,
            Event::Text(t) if el.children.is_empty() => el.text.push_str(&t.xml10_content()),
            Event::CData(c) if el.children.is_empty() => el.text.push_str(&c.xml10_content()),
            Event::GeneralRef(r) => match resolve(&r) {
                Some(s) if el.children.is_empty() => el.text.push_str(&s),
                Some(_) => {}
                None => {
                    let what = format!("undefined entity &{};", r.xml10_content());
                    return Err(malformed(w.xml, el.at(), w.reader.buffer_position(), &what));
                }
            },
            Event::Eof => {
                let what = format!("the file ends inside <{}>", el.name);
                return Err(malformed(w.xml, el.at(), w.reader.buffer_position(), &what));
            }
            _ => {}
        }
    }
    el.text = el.text.trim().to_owned();
    Ok(el)
}

/// Walks `xml` (BOM allowed), handing everything at or below the first element whose
/// local name is in `messages` to `v`.
///
/// # Errors
/// [`AnswerError::MalformedXml`], [`AnswerError::TooDeep`], whatever `v` returns, and
/// [`AnswerError::UnknownMessage`] when no element has one of the `messages` names.
pub(crate) fn walk(xml: &str, messages: &[&str], v: &mut impl Visitor) -> Result<(), AnswerError> {
    let xml = xml.strip_prefix('\u{feff}').unwrap_or(xml);
    let mut w = Walker {
        xml,
        reader: Reader::from_str(xml),
        frames: Vec::new(),
        top_counts: Vec::new(),
        message: None,
        done: false,
    };
    loop {
        match w.next_event()? {
            Event::Start(s) => w.start(&s, false, messages, v)?,
            Event::Empty(s) => w.start(&s, true, messages, v)?,
            Event::End(_) => w.end(v)?,
            Event::Text(t) => w.add_text(&t.xml10_content()),
            Event::CData(c) => w.add_text(&c.xml10_content()),
            Event::GeneralRef(r) => match resolve(&r) {
                Some(s) => w.add_text(&s),
                None => {
                    let what = format!("undefined entity &{};", r.xml10_content());
                    return Err(w.error(w.reader.buffer_position(), &what));
                }
            },
            Event::Eof => break,
            _ => {}
        }
    }
    if let Some(open) = w.frames.last() {
        let what = format!("the file ends inside <{}>", open.name);
        return Err(w.error(w.reader.buffer_position(), &what));
    }
    if w.message.is_none() {
        let (path, name) = first_elements(xml)?;
        return Err(AnswerError::UnknownMessage {
            at: AnswerLocation::Path(path),
            name,
        });
    }
    Ok(())
}

/// Finds which of `messages` the document holds: `Ok(Ok(name))`, or `Ok(Err((path,
/// name)))` naming the root's first child (or the root) when none is there.
///
/// # Errors
/// [`AnswerError::MalformedXml`] when the XML breaks before an answer is known.
pub(crate) fn sniff(
    xml: &str,
    messages: &[&'static str],
) -> Result<Result<&'static str, (String, String)>, AnswerError> {
    let xml = xml.strip_prefix('\u{feff}').unwrap_or(xml);
    let mut reader = Reader::from_str(xml);
    let mut depth = 0usize;
    loop {
        let event = reader.read_event().map_err(|e| {
            malformed(
                xml,
                AnswerLocation::File,
                reader.error_position(),
                &e.to_string(),
            )
        })?;
        let is_start = matches!(event, Event::Start(_));
        match event {
            Event::Start(s) | Event::Empty(s) => {
                let name = s.local_name();
                if let Some(found) = messages.iter().find(|m| **m == name.as_ref()) {
                    return Ok(Ok(*found));
                }
                if is_start {
                    depth += 1;
                    if depth > ANSWER_XML_DEPTH_MAX {
                        return Err(AnswerError::TooDeep {
                            at: AnswerLocation::File,
                        });
                    }
                }
            }
            Event::End(_) => depth = depth.saturating_sub(1),
            Event::Eof => return first_elements(xml).map(Err),
            _ => {}
        }
    }
}

/// The path and local name of the root's first child element, or of the root.
fn first_elements(xml: &str) -> Result<(String, String), AnswerError> {
    let mut reader = Reader::from_str(xml);
    let mut root: Option<String> = None;
    loop {
        let event = reader.read_event().map_err(|e| {
            malformed(
                xml,
                AnswerLocation::File,
                reader.error_position(),
                &e.to_string(),
            )
        })?;
        let is_empty = matches!(event, Event::Empty(_));
        match event {
            Event::Start(s) | Event::Empty(s) => {
                let name = s.local_name().as_ref().to_owned();
                match &root {
                    None if is_empty => return Ok((name.clone(), name)),
                    None => root = Some(name),
                    Some(r) => return Ok((format!("{r}/{name}"), name)),
                }
            }
            Event::Eof | Event::End(_) => {
                return match root {
                    Some(r) => Ok((r.clone(), r)),
                    None => Err(malformed(xml, AnswerLocation::File, 0, "no element")),
                };
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Collect {
        seen: Vec<String>,
    }

    impl Visitor for Collect {
        fn is_record(&self, parent: &Cursor<'_>, name: &str) -> bool {
            parent.is(&["L"]) && name == "R"
        }

        fn visit(&mut self, at: &Cursor<'_>, item: Item<'_>) -> Result<(), AnswerError> {
            let line = match item {
                Item::Open => format!("open {}", at.path()),
                Item::Leaf { text } => format!("leaf {} {text:?}", at.path()),
                Item::Close => format!("close {}", at.path()),
                Item::Record(el) => {
                    format!(
                        "record {} {:?} {:?}",
                        el.path,
                        el.text_at(&["X", "Y"]),
                        el.attrs
                    )
                }
            };
            self.seen.push(line);
            Ok(())
        }
    }

    #[test]
    fn walks_prefixes_entities_and_records() {
        let xml = "\u{feff}<?xml version=\"1.0\"?><env><p:Doc xmlns:p=\"urn:x\"><p:M>\
            <L><A>a &lt;b&gt; &#65;</A><R p:c=\"1 &amp; 2\"><X><Y> y </Y></X></R><R/></L>\
            <![CDATA[ignored]]></p:M></p:Doc></env>";
        let mut c = Collect::default();
        walk(xml, &["M"], &mut c).unwrap();
        assert_eq!(
            c.seen,
            [
                "open env/Doc/M",
                "open env/Doc/M/L",
                "open env/Doc/M/L/A",
                "leaf env/Doc/M/L/A \"a <b> A\"",
                "record env/Doc/M/L/R Some(\"y\") [(\"c\", \"1 & 2\")]",
                "record env/Doc/M/L/R None []",
                "close env/Doc/M/L",
                "close env/Doc/M",
            ]
        );
    }

    #[test]
    fn errors_say_where() {
        let mut c = Collect::default();
        let err = walk("<D><M><L><R><X>", &["M"], &mut c).unwrap_err();
        assert_eq!(err.code(), "malformed_xml");
        assert_eq!(err.location().to_string(), "D/M/L/R/X");
        let err = walk("<D><M>&nbsp;</M></D>", &["M"], &mut c).unwrap_err();
        assert_eq!(err.code(), "malformed_xml", "{err}");
        let err = walk("<D><Other/></D>", &["M"], &mut c).unwrap_err();
        assert_eq!(err.code(), "unknown_message");
        assert_eq!(err.location().to_string(), "D/Other");
        let deep = "<a>".repeat(ANSWER_XML_DEPTH_MAX + 1);
        let err = walk(&format!("<M>{deep}"), &["M"], &mut c).unwrap_err();
        assert_eq!(err.code(), "too_deep");
    }
}
