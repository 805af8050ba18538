//! Source lines: how a document's text is cut into numbered lines and columns.
//!
//! Owns: the line model every other module counts with. Lines are separated by `\n`; a final
//! newline does not start another line, so an empty source has no lines and `"a\n"` has one.
//! A `\r` before the `\n` stays part of the line's text, so CRLF sources come back verbatim.
//! Columns are 1-based Unicode code points over a line's characters and then its newline.
//! Does not own: Markdown structure (the `blocks` module, which counts with these lines).

use std::borrow::Cow;
use std::ops::Range;

/// The line table of one source: byte offsets where each line starts and ends.
#[derive(Debug, Clone)]
pub struct SourceLines<'a> {
    source: &'a str,
    /// Byte offset of the start of each line; `starts.len()` is the line count. Borrowed when
    /// the table was cut once and kept (the reader's `Analysis`).
    starts: Cow<'a, [usize]>,
}

impl<'a> SourceLines<'a> {
    /// Cuts `source` into lines.
    pub fn new(source: &'a str) -> Self {
        let mut starts = Vec::new();
        if !source.is_empty() {
            starts.push(0);
        }
        for (at, byte) in source.bytes().enumerate() {
            if byte == b'\n' && at + 1 < source.len() {
                starts.push(at + 1);
            }
        }
        Self {
            source,
            starts: Cow::Owned(starts),
        }
    }

    /// The lines of `source` over `starts`, a table [`SourceLines::into_table`] gave for this
    /// very source.
    pub(crate) fn with_table(source: &'a str, starts: &'a [usize]) -> Self {
        Self {
            source,
            starts: Cow::Borrowed(starts),
        }
    }

    /// The line table, to keep beside the source.
    pub(crate) fn into_table(self) -> Vec<usize> {
        self.starts.into_owned()
    }

    /// The source these lines were cut from.
    pub fn source(&self) -> &'a str {
        self.source
    }

    /// How many lines the source has (not how many newlines).
    pub fn count(&self) -> usize {
        self.starts.len()
    }

    /// Byte range of 1-based line `line`, its newline included. `None` outside the source.
    pub fn byte_range(&self, line: usize) -> Option<Range<usize>> {
        let start = *self.starts.get(line.checked_sub(1)?)?;
        let end = self.starts.get(line).copied().unwrap_or(self.source.len());
        Some(start..end)
    }

    /// Text of 1-based line `line`, its newline (and any `\r` before it) included.
    pub fn text(&self, line: usize) -> Option<&'a str> {
        self.byte_range(line).map(|range| &self.source[range])
    }

    /// The 1-based line that holds byte offset `byte`; the last line for the source's end.
    pub fn line_of_byte(&self, byte: usize) -> usize {
        match self.starts.binary_search(&byte) {
            Ok(index) => index + 1,
            Err(index) => index.max(1),
        }
    }

    /// Whether 1-based line `line` holds only spaces, tabs and its line ending.
    pub fn is_blank(&self, line: usize) -> bool {
        self.text(line).is_some_and(is_blank_text)
    }

    /// Number of columns of a line: its characters and then its newline, if it has one.
    pub fn columns(&self, line: usize) -> usize {
        self.text(line).map_or(0, |text| text.chars().count())
    }

    /// Byte offset of 1-based `column` in 1-based `line`; `None` when either is outside.
    pub fn byte_of_column(&self, line: usize, column: usize) -> Option<usize> {
        let range = self.byte_range(line)?;
        let text = &self.source[range.clone()];
        let (at, _) = text.char_indices().nth(column.checked_sub(1)?)?;
        Some(range.start + at)
    }

    /// 1-based column of the character that starts at byte offset `byte` (on a char boundary).
    pub fn column_of_byte(&self, byte: usize) -> usize {
        let line = self.line_of_byte(byte);
        let start = self.byte_range(line).map_or(0, |range| range.start);
        self.source[start..byte].chars().count() + 1
    }
}

/// Whether a piece of text is blank in the Markdown sense: only spaces, tabs, `\r` and `\n`.
pub fn is_blank_text(text: &str) -> bool {
    text.bytes()
        .all(|byte| matches!(byte, b' ' | b'\t' | b'\r' | b'\n'))
}

#[cfg(test)]
mod tests {
    use super::*;

    // READ-08: "Lines are separated by \n; a final newline does not start another line, so
    // lines counts lines, not newlines."
    #[test]
    fn read_08_final_newline_starts_no_line() {
        assert_eq!(SourceLines::new("").count(), 0);
        assert_eq!(SourceLines::new("a").count(), 1);
        assert_eq!(SourceLines::new("a\n").count(), 1);
        assert_eq!(SourceLines::new("a\n\n").count(), 2);
        assert_eq!(SourceLines::new("\n").count(), 1);
        assert_eq!(SourceLines::new("a\nb").count(), 2);
    }

    #[test]
    fn read_08_crlf_stays_in_the_line() {
        let lines = SourceLines::new("one\r\ntwo\r\n");
        assert_eq!(lines.count(), 2);
        assert_eq!(lines.text(1), Some("one\r\n"));
        assert_eq!(lines.text(2), Some("two\r\n"));
        assert_eq!(lines.text(3), None);
        assert_eq!(lines.columns(1), 5);
    }

    // READ-15: "column is a 1-based position in line offset, counted in Unicode code points
    // (a line's characters and then its newline, if it has one)".
    #[test]
    fn read_15_columns_count_code_points_then_the_newline() {
        let lines = SourceLines::new("a😀漢\nlast");
        assert_eq!(lines.columns(1), 4);
        assert_eq!(lines.columns(2), 4);
        assert_eq!(lines.byte_of_column(1, 2), Some(1));
        assert_eq!(lines.byte_of_column(1, 3), Some(5));
        assert_eq!(lines.byte_of_column(1, 4), Some(8));
        assert_eq!(lines.byte_of_column(1, 5), None);
        assert_eq!(lines.byte_of_column(1, 0), None);
        assert_eq!(lines.column_of_byte(5), 3);
        assert_eq!(lines.line_of_byte(9), 2);
        assert_eq!(lines.line_of_byte(0), 1);
    }
}
