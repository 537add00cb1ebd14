//! Reason codes of returned bank transfers: ISO 20022 return reasons used in SEPA
//! (`pacs.004`, `camt.054`) and NACHA return codes (`R01`…).

use std::fmt;

/// The payment rail a return code belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BankRail {
    /// SEPA credit transfers (EUR).
    Sepa,
    /// US ACH (NACHA).
    Ach,
}

/// One known return reason.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Entry {
    code: &'static str,
    rail: BankRail,
    description: &'static str,
    account_invalid: bool,
}

const fn sepa(code: &'static str, description: &'static str, account_invalid: bool) -> Entry {
    Entry {
        code,
        rail: BankRail::Sepa,
        description,
        account_invalid,
    }
}

const fn ach(code: &'static str, description: &'static str, account_invalid: bool) -> Entry {
    Entry {
        code,
        rail: BankRail::Ach,
        description,
        account_invalid,
    }
}

/// Known reasons. `account_invalid` is true where resending to the same bank details
/// cannot succeed: the account or bank identifier is wrong, closed, blocked, not allowed to
/// receive the transfer, or its holder is deceased or refuses it; the provider must enter
/// new details.
const REASONS: &[Entry] = &[
    // SEPA (ISO 20022 ExternalReturnReason1Code).
    sepa(
        "AC01",
        "Incorrect account number: the account number is invalid or missing",
        true,
    ),
    sepa("AC03", "Invalid creditor account number", true),
    sepa(
        "AC04",
        "Closed account number: the account has been closed",
        true,
    ),
    sepa(
        "AC06",
        "Blocked account: postings to the account are prohibited",
        true,
    ),
    sepa(
        "AG01",
        "Transaction forbidden on this type of account",
        true,
    ),
    sepa("AG02", "Invalid bank operation code", false),
    sepa("AM04", "Insufficient funds", false),
    sepa("AM05", "Duplication", false),
    sepa("AM09", "Wrong amount", false),
    sepa("BE04", "Missing or incorrect creditor address", true),
    sepa(
        "CNOR",
        "Creditor bank is not registered under this BIC in the clearing system",
        true,
    ),
    sepa("DUPL", "Duplicate payment", false),
    sepa("ED05", "Settlement failed", false),
    sepa("FF01", "Invalid file format", false),
    sepa("FOCR", "Return following a cancellation request", false),
    sepa("FRAD", "Fraudulent origin", false),
    sepa("MD07", "End customer deceased", true),
    sepa("MS02", "Reason not specified by the customer", false),
    sepa("MS03", "Reason not specified by the agent", false),
    sepa("RC01", "Bank identifier (BIC) incorrect", true),
    sepa(
        "RR01",
        "Missing debtor account or identification (regulatory)",
        false,
    ),
    sepa("RR02", "Missing debtor name or address (regulatory)", false),
    sepa(
        "RR03",
        "Missing creditor name or address (regulatory)",
        true,
    ),
    sepa("RR04", "Regulatory reason", false),
    sepa("TECH", "Technical problem", false),
    sepa("CUST", "Requested by customer", false),
    // ACH (NACHA Operating Rules, Appendix Four).
    ach("R01", "Insufficient Funds", false),
    ach("R02", "Account Closed", true),
    ach("R03", "No Account/Unable to Locate Account", true),
    ach("R04", "Invalid Account Number Structure", true),
    ach(
        "R05",
        "Unauthorized Debit to Consumer Account Using Corporate SEC Code",
        false,
    ),
    ach("R06", "Returned per ODFI's Request", false),
    ach("R07", "Authorization Revoked by Customer", false),
    ach("R08", "Payment Stopped", false),
    ach("R09", "Uncollected Funds", false),
    ach(
        "R10",
        "Customer Advises Originator is Not Known to Receiver and/or Originator is Not Authorized by Receiver to Debit Receiver's Account",
        false,
    ),
    ach(
        "R11",
        "Customer Advises Entry Not in Accordance with the Terms of the Authorization",
        false,
    ),
    ach("R12", "Account Sold to Another DFI", true),
    ach("R13", "Invalid ACH Routing Number", true),
    ach(
        "R14",
        "Representative Payee Deceased or Unable to Continue in That Capacity",
        true,
    ),
    ach(
        "R15",
        "Beneficiary or Account Holder (Other Than a Representative Payee) Deceased",
        true,
    ),
    ach(
        "R16",
        "Account Frozen/Entry Returned per OFAC Instruction",
        true,
    ),
    ach(
        "R17",
        "File Record Edit Criteria/Entry with Invalid Account Number Initiated Under Questionable Circumstances",
        false,
    ),
    ach("R18", "Improper Effective Entry Date", false),
    ach("R19", "Amount Field Error", false),
    ach("R20", "Non-Transaction Account", true),
    ach("R21", "Invalid Company Identification", false),
    ach("R22", "Invalid Individual ID Number", false),
    ach("R23", "Credit Entry Refused by Receiver", true),
    ach("R24", "Duplicate Entry", false),
    ach("R25", "Addenda Error", false),
    ach("R26", "Mandatory Field Error", false),
    ach("R27", "Trace Number Error", false),
    ach("R28", "Routing Number Check Digit Error", true),
    ach("R29", "Corporate Customer Advises Not Authorized", false),
    ach(
        "R30",
        "RDFI Not Participant in Check Truncation Program",
        false,
    ),
    ach("R31", "Permissible Return Entry (CCD and CTX only)", false),
    ach("R32", "RDFI Non-Settlement", false),
    ach("R33", "Return of XCK Entry", false),
    ach("R34", "Limited Participation DFI", false),
    ach("R35", "Return of Improper Debit Entry", false),
    ach("R36", "Return of Improper Credit Entry", false),
    ach("R37", "Source Document Presented for Payment", false),
    ach("R38", "Stop Payment on Source Document", false),
    ach(
        "R39",
        "Improper Source Document/Source Document Presented for Payment",
        false,
    ),
    ach("R61", "Misrouted Return", false),
    ach("R62", "Return of Erroneous or Reversing Debit", false),
    ach("R67", "Duplicate Return", false),
    ach("R68", "Untimely Return", false),
    ach("R69", "Field Error(s)", false),
    ach(
        "R70",
        "Permissible Return Entry Not Accepted/Return Not Requested by ODFI",
        false,
    ),
    ach("R80", "IAT Entry Coding Error", false),
    ach("R81", "Non-Participant in IAT Program", false),
    ach("R82", "Invalid Foreign Receiving DFI Identification", false),
    ach("R83", "Foreign Receiving DFI Unable to Settle", false),
    ach("R84", "Entry Not Processed by Gateway", false),
    ach(
        "R85",
        "Incorrectly Coded Outbound International Payment",
        false,
    ),
];

/// Why a string is not a known return reason code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReturnCodeError {
    /// Not in the table of SEPA and ACH return codes.
    #[error("unknown return reason code {code:?}")]
    Unknown {
        /// The code given (trimmed, at most 8 characters kept).
        code: String,
    },
}

impl ReturnCodeError {
    /// Stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unknown { .. } => "unknown_return_code",
        }
    }
}

/// A known reason why a bank returned a transfer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReturnReason(&'static Entry);

impl ReturnReason {
    /// Parses a SEPA (`AC04`) or ACH (`R03`) reason code; surrounding whitespace is
    /// ignored and letters may be lower case.
    ///
    /// # Errors
    /// [`ReturnCodeError::Unknown`] for any other code.
    pub fn parse(input: &str) -> Result<Self, ReturnCodeError> {
        let code = input.trim();
        REASONS
            .iter()
            .find(|e| e.code.eq_ignore_ascii_case(code))
            .map(Self)
            .ok_or_else(|| ReturnCodeError::Unknown {
                code: code.chars().take(8).collect(),
            })
    }

    /// The canonical code, e.g. `AC04` or `R03`.
    pub fn code(&self) -> &'static str {
        self.0.code
    }

    /// The rail the code belongs to.
    pub fn rail(&self) -> BankRail {
        self.0.rail
    }

    /// What the code means.
    pub fn description(&self) -> &'static str {
        self.0.description
    }

    /// Whether the return means the payee's bank details are unusable (wrong, closed,
    /// blocked, holder deceased, transfer refused): the payout fails and the details must
    /// be marked invalid. False for reasons that say nothing against the account
    /// (technical, duplicates, insufficient funds, regulatory data about the debtor).
    pub fn invalidates_account_details(&self) -> bool {
        self.0.account_invalid
    }

    /// Every known reason, SEPA first, in table order.
    pub fn all() -> impl Iterator<Item = ReturnReason> {
        REASONS.iter().map(Self)
    }
}

impl fmt::Display for ReturnReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0.code, self.0.description)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_well_formed() {
        for (i, e) in REASONS.iter().enumerate() {
            assert!(
                REASONS[i + 1..].iter().all(|o| o.code != e.code),
                "{}",
                e.code
            );
            match e.rail {
                BankRail::Ach => assert!(e.code.len() == 3 && e.code.starts_with('R')),
                BankRail::Sepa => assert_eq!(e.code.len(), 4),
            }
        }
    }
}
