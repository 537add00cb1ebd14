//! Reader for ISO 20022 `pain.002` customer payment status reports (written for
//! `pain.002.001.10`; older and newer versions with the same element names read too).
//!
//! A report answers one `pain.001` file (`OrgnlGrpInfAndSts/OrgnlMsgId`). It may give a
//! status for the whole file (`GrpSts`), per payment information block
//! (`OrgnlPmtInfAndSts/PmtInfSts`) and per transaction (`TxInfAndSts/TxSts`, by
//! `OrgnlEndToEndId`), each with optional reasons (`StsRsnInf/Rsn/Cd` such as `AC01`,
//! `AC04`, `MS03`, or `Rsn/Prtry`). They are read into one flat list of
//! [`StatusEntry`]s, in file order with the group status first; a transaction without
//! `TxSts` takes its block's status, or else the group's.

use crate::answers::{
    ANSWER_ENTRIES_MAX, Amount, AnswerError, AnswerLocation, CurrencyCode, ReasonCode, parse_cents,
};
use crate::xml_read::{self, Cursor, Element, Item, Visitor};

/// Local name of the message element.
pub const PAIN_002_MESSAGE: &str = "CstmrPmtStsRpt";

/// The namespace of `pain.002.001.10`.
pub const PAIN_002_001_10_NAMESPACE: &str = "urn:iso:std:iso:20022:tech:xsd:pain.002.001.10";

/// What a status code means for a payment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusClass {
    /// Received or accepted for processing, not yet booked (`RCVD`, `ACTC`, `ACCP`,
    /// `ACSP`, `ACWC`, `ACFC`, `ACWP`, `ACPD`, `ACIS`).
    Accepted,
    /// Settled on the debtor's or creditor's account (`ACSC`, `ACCC`).
    Settled,
    /// Waiting (`PDNG`, `BLCK`).
    Pending,
    /// Some transactions accepted, some rejected; look at the transactions (`PART`,
    /// `PATC`).
    Partial,
    /// Rejected or cancelled: the payment will not be made (`RJCT`, `CANC`).
    Rejected,
    /// Any other code (for example the verification-of-payee results `RCVC`, `RVMC`,
    /// `RVNM`, `RVNA`): informational, says nothing about the money.
    Other,
}

/// A payment status code (`ExternalPaymentTransactionStatus1Code` or
/// `ExternalPaymentGroupStatus1Code`): 1 to 4 letters or digits, upper case.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StatusCode(ReasonCode);

impl StatusCode {
    /// Parses a status code (any case); `None` unless 1 to 4 letters or digits.
    pub fn parse(input: &str) -> Option<Self> {
        ReasonCode::parse(input).map(Self)
    }

    /// The code, e.g. `RJCT`.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// What the code means for the payment.
    pub fn class(&self) -> StatusClass {
        match self.as_str() {
            "RCVD" | "ACTC" | "ACCP" | "ACSP" | "ACWC" | "ACFC" | "ACWP" | "ACPD" | "ACIS" => {
                StatusClass::Accepted
            }
            "ACSC" | "ACCC" => StatusClass::Settled,
            "PDNG" | "BLCK" => StatusClass::Pending,
            "PART" | "PATC" => StatusClass::Partial,
            "RJCT" | "CANC" => StatusClass::Rejected,
            _ => StatusClass::Other,
        }
    }
}

/// One `StsRsnInf`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatusReason {
    /// `Rsn/Cd`, e.g. `AC04`.
    pub code: Option<ReasonCode>,
    /// `Rsn/Prtry`: a bank's own reason.
    pub proprietary: Option<String>,
    /// `AddtlInf` lines.
    pub additional_info: Vec<String>,
}

/// What a status is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StatusTarget {
    /// The whole original message (`OrgnlGrpInfAndSts/GrpSts`).
    Message,
    /// One payment information block (`OrgnlPmtInfAndSts/PmtInfSts`).
    PaymentInformation {
        /// `OrgnlPmtInfId`.
        pmt_inf_id: String,
    },
    /// One transaction (`TxInfAndSts`).
    Transaction {
        /// The enclosing block's `OrgnlPmtInfId`.
        pmt_inf_id: Option<String>,
        /// `OrgnlEndToEndId`: the payout's reference.
        end_to_end_id: String,
    },
}

/// One status, at one level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusEntry {
    /// What it is about.
    pub target: StatusTarget,
    /// The status.
    pub status: StatusCode,
    /// Why (usually given for rejections).
    pub reasons: Vec<StatusReason>,
    /// `OrgnlTxRef/Amt/InstdAmt` (or `IntrBkSttlmAmt`) of a transaction, when given.
    pub amount: Option<Amount>,
    /// Where in the file.
    pub path: String,
}

impl StatusEntry {
    /// The first reason code given, if any.
    pub fn reason_code(&self) -> Option<&ReasonCode> {
        self.reasons.iter().find_map(|r| r.code.as_ref())
    }
}

/// A `pain.002` report, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusReport {
    /// The report's own `GrpHdr/MsgId`.
    pub msg_id: String,
    /// The `pain.001` it answers (`OrgnlMsgId`).
    pub original_msg_id: String,
    /// `OrgnlMsgNmId`, e.g. `pain.001.001.09`.
    pub original_msg_name_id: Option<String>,
    /// Group, block and transaction statuses in file order, the group's first.
    pub entries: Vec<StatusEntry>,
}

/// Reads a `pain.002` report (UTF-8, byte order mark allowed).
///
/// # Errors
/// [`AnswerError`] saying what and where: malformed XML, no `CstmrPmtStsRpt`, a missing
/// `MsgId`, `OrgnlMsgId`, `OrgnlPmtInfId`, `OrgnlEndToEndId` or status, a code that is not
/// 1 to 4 letters or digits, a bad amount or currency, too many entries.
pub fn read_pain002(xml: &str) -> Result<StatusReport, AnswerError> {
    let mut r = Pain002::default();
    xml_read::walk(xml, &[PAIN_002_MESSAGE], &mut r)?;
    r.finish()
}

/// The block being read.
#[derive(Default)]
struct Block {
    id: Option<String>,
    status: Option<(StatusCode, String)>,
    reasons: Vec<StatusReason>,
    /// Where its own entry goes in `entries`.
    insert_at: usize,
}

#[derive(Default)]
struct Pain002 {
    message_path: String,
    msg_id: Option<String>,
    original_msg_id: Option<String>,
    original_msg_name_id: Option<String>,
    group_status: Option<(StatusCode, String)>,
    group_reasons: Vec<StatusReason>,
    block: Block,
    entries: Vec<StatusEntry>,
}

impl Visitor for Pain002 {
    fn is_record(&self, parent: &Cursor<'_>, name: &str) -> bool {
        match name {
            "TxInfAndSts" => parent.is(&["OrgnlPmtInfAndSts"]),
            "StsRsnInf" => parent.is(&["OrgnlPmtInfAndSts"]) || parent.is(&["OrgnlGrpInfAndSts"]),
            _ => false,
        }
    }

    fn visit(&mut self, at: &Cursor<'_>, item: Item<'_>) -> Result<(), AnswerError> {
        match item {
            Item::Open if at.is(&[]) => self.message_path = at.path(),
            Item::Open if at.is(&["OrgnlPmtInfAndSts"]) => {
                self.block = Block {
                    insert_at: self.entries.len(),
                    ..Block::default()
                };
            }
            Item::Leaf { text } => self.leaf(at, text)?,
            Item::Record(el) if el.name == "StsRsnInf" => {
                let reason = status_reason(&el)?;
                if at.is(&["OrgnlGrpInfAndSts"]) {
                    self.group_reasons.push(reason);
                } else {
                    self.block.reasons.push(reason);
                }
            }
            Item::Record(el) => {
                let entry = self.transaction(&el)?;
                self.push(entry, &el.path)?;
            }
            Item::Close if at.is(&["OrgnlPmtInfAndSts"]) => self.close_block(at)?,
            _ => {}
        }
        Ok(())
    }
}

impl Pain002 {
    fn leaf(&mut self, at: &Cursor<'_>, text: &str) -> Result<(), AnswerError> {
        let value = (!text.is_empty()).then(|| text.to_owned());
        if at.is(&["GrpHdr", "MsgId"]) {
            self.msg_id = value;
        } else if at.is(&["OrgnlGrpInfAndSts", "OrgnlMsgId"]) {
            self.original_msg_id = value;
        } else if at.is(&["OrgnlGrpInfAndSts", "OrgnlMsgNmId"]) {
            self.original_msg_name_id = value;
        } else if at.is(&["OrgnlGrpInfAndSts", "GrpSts"]) {
            self.group_status = Some((status_code(text, || at.at())?, at.path()));
        } else if at.is(&["OrgnlPmtInfAndSts", "OrgnlPmtInfId"]) {
            self.block.id = value;
        } else if at.is(&["OrgnlPmtInfAndSts", "PmtInfSts"]) {
            self.block.status = Some((status_code(text, || at.at())?, at.path()));
        }
        Ok(())
    }

    fn push(&mut self, entry: StatusEntry, path: &str) -> Result<(), AnswerError> {
        if self.entries.len() >= ANSWER_ENTRIES_MAX {
            return Err(AnswerError::TooManyEntries {
                at: AnswerLocation::Path(path.to_owned()),
            });
        }
        self.entries.push(entry);
        Ok(())
    }

    fn close_block(&mut self, at: &Cursor<'_>) -> Result<(), AnswerError> {
        let Some(pmt_inf_id) = self.block.id.clone() else {
            return Err(AnswerError::missing(format!("{}/OrgnlPmtInfId", at.path())));
        };
        if let Some((status, path)) = self.block.status.take() {
            if self.entries.len() >= ANSWER_ENTRIES_MAX {
                return Err(AnswerError::TooManyEntries {
                    at: AnswerLocation::Path(path),
                });
            }
            let mut entry = StatusEntry::default_for(
                StatusTarget::PaymentInformation { pmt_inf_id },
                status,
                path,
            );
            entry.reasons = std::mem::take(&mut self.block.reasons);
            self.entries.insert(self.block.insert_at, entry);
        }
        Ok(())
    }

    /// One `TxInfAndSts`.
    fn transaction(&self, el: &Element) -> Result<StatusEntry, AnswerError> {
        let end_to_end_id = el
            .text_at(&["OrgnlEndToEndId"])
            .ok_or_else(|| AnswerError::missing(el.path_of("OrgnlEndToEndId")))?;
        let status = match el.child("TxSts") {
            Some(s) => status_code(&s.text, || s.at())?,
            None => self
                .block
                .status
                .as_ref()
                .or(self.group_status.as_ref())
                .map(|(s, _)| s.clone())
                .ok_or_else(|| AnswerError::missing(el.path_of("TxSts")))?,
        };
        let reasons = el
            .children_named("StsRsnInf")
            .map(status_reason)
            .collect::<Result<Vec<_>, _>>()?;
        let amount = match el.find(&["OrgnlTxRef", "Amt", "InstdAmt"]) {
            Some(a) => Some(amount(a)?),
            None => match el.find(&["OrgnlTxRef", "IntrBkSttlmAmt"]) {
                Some(a) => Some(amount(a)?),
                None => None,
            },
        };
        Ok(StatusEntry {
            target: StatusTarget::Transaction {
                pmt_inf_id: self.block.id.clone(),
                end_to_end_id: end_to_end_id.to_owned(),
            },
            status,
            reasons,
            amount,
            path: el.path.clone(),
        })
    }

    fn finish(mut self) -> Result<StatusReport, AnswerError> {
        let msg_id = self
            .msg_id
            .ok_or_else(|| AnswerError::missing(format!("{}/GrpHdr/MsgId", self.message_path)))?;
        let original_msg_id = self.original_msg_id.ok_or_else(|| {
            AnswerError::missing(format!(
                "{}/OrgnlGrpInfAndSts/OrgnlMsgId",
                self.message_path
            ))
        })?;
        if let Some((status, path)) = self.group_status {
            let mut entry = StatusEntry::default_for(StatusTarget::Message, status, path);
            entry.reasons = self.group_reasons;
            self.entries.insert(0, entry);
        }
        Ok(StatusReport {
            msg_id,
            original_msg_id,
            original_msg_name_id: self.original_msg_name_id,
            entries: self.entries,
        })
    }
}

impl StatusEntry {
    fn default_for(target: StatusTarget, status: StatusCode, path: String) -> Self {
        Self {
            target,
            status,
            reasons: Vec::new(),
            amount: None,
            path,
        }
    }
}

fn status_code(text: &str, at: impl FnOnce() -> AnswerLocation) -> Result<StatusCode, AnswerError> {
    StatusCode::parse(text).ok_or_else(|| AnswerError::InvalidCode {
        at: at(),
        value: text.to_owned(),
    })
}

/// One `StsRsnInf`.
fn status_reason(el: &Element) -> Result<StatusReason, AnswerError> {
    let code = match el.find(&["Rsn", "Cd"]) {
        Some(c) => Some(
            ReasonCode::parse(&c.text).ok_or_else(|| AnswerError::InvalidCode {
                at: c.at(),
                value: c.text.clone(),
            })?,
        ),
        None => None,
    };
    Ok(StatusReason {
        code,
        proprietary: el.text_at(&["Rsn", "Prtry"]).map(str::to_owned),
        additional_info: el
            .children_named("AddtlInf")
            .map(|a| a.text.clone())
            .filter(|t| !t.is_empty())
            .collect(),
    })
}

/// An amount element with its `Ccy` attribute.
pub(crate) fn amount(el: &Element) -> Result<Amount, AnswerError> {
    let cents = parse_cents(&el.text).map_err(|e| e.at(el.at(), &el.text))?;
    let ccy = el
        .attr("Ccy")
        .ok_or_else(|| AnswerError::missing(el.path_of("@Ccy")))?;
    let currency = CurrencyCode::parse(ccy).ok_or_else(|| AnswerError::InvalidCurrency {
        at: AnswerLocation::Path(el.path_of("@Ccy")),
        value: ccy.to_owned(),
    })?;
    Ok(Amount { cents, currency })
}
