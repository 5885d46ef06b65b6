//! Short texts the layer formats per response (header values, the denial body), built on the
//! stack so that each costs one heap allocation of its exact size: the copy `HeaderValue` or
//! the body keeps. (Formatting into a `String` first and converting it costs two.)

use std::fmt;

use http::HeaderValue;

/// Bytes held on the stack; longer texts move to the heap.
const INLINE: usize = 128;

/// A text formatted with `write!`, on the stack while it fits in [`INLINE`] bytes.
pub(crate) struct Text {
    inline: [u8; INLINE],
    len: usize,
    /// The whole text once it outgrew the stack buffer.
    spilled: Option<Vec<u8>>,
}

impl Text {
    pub(crate) fn new() -> Self {
        Self {
            inline: [0; INLINE],
            len: 0,
            spilled: None,
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        match &self.spilled {
            Some(spilled) => spilled,
            None => &self.inline[..self.len],
        }
    }

    /// Appends `s`.
    #[inline]
    pub(crate) fn push(&mut self, s: &str) {
        let _ = fmt::Write::write_str(self, s);
    }

    /// Appends `n` in decimal (without `core::fmt`, which costs several times more).
    #[inline]
    pub(crate) fn push_int(&mut self, n: u64) {
        self.push(itoa::Buffer::new().format(n));
    }

    /// The text as a header value; `None` if it holds bytes a header value may not.
    pub(crate) fn to_header_value(&self) -> Option<HeaderValue> {
        HeaderValue::from_bytes(self.as_bytes()).ok()
    }
}

impl fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if let Some(spilled) = &mut self.spilled {
            spilled.extend_from_slice(s.as_bytes());
            return Ok(());
        }
        let end = self.len + s.len();
        match self.inline.get_mut(self.len..end) {
            Some(room) => {
                room.copy_from_slice(s.as_bytes());
                self.len = end;
            }
            None => {
                let mut spilled = Vec::with_capacity(end.max(2 * INLINE));
                spilled.extend_from_slice(&self.inline[..self.len]);
                spilled.extend_from_slice(s.as_bytes());
                self.spilled = Some(spilled);
            }
        }
        Ok(())
    }
}

/// `n` in decimal as a header value, in one allocation (`HeaderValue::from(u64)` makes two):
/// `itoa` writes the digits on the stack.
pub(crate) fn int_value(n: u64) -> HeaderValue {
    let mut digits = itoa::Buffer::new();
    // ASCII digits are always a valid value; http's own conversion is the fallback all the same.
    HeaderValue::from_str(digits.format(n)).unwrap_or_else(|_| HeaderValue::from(n))
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;

    #[test]
    fn integers_are_written_in_decimal() {
        for n in [0, 1, 9, 10, 3600, 1_000_000_007, u64::MAX] {
            assert_eq!(int_value(n), HeaderValue::from(n), "{n}");
        }
    }

    #[test]
    fn texts_longer_than_the_stack_buffer_move_to_the_heap() {
        let mut text = Text::new();
        let mut expected = String::new();
        for i in 0..100 {
            write!(text, "\"tier-{i}\";r={i};t={}, ", i * 7).unwrap();
            write!(expected, "\"tier-{i}\";r={i};t={}, ", i * 7).unwrap();
            assert_eq!(text.as_bytes(), expected.as_bytes());
        }
        assert!(expected.len() > INLINE);
        assert_eq!(text.to_header_value().unwrap(), expected.as_str());
    }

    #[test]
    fn a_text_that_fills_the_stack_buffer_exactly_stays_there() {
        let mut text = Text::new();
        text.write_str(&"a".repeat(INLINE - 1)).unwrap();
        text.write_str("b").unwrap();
        assert!(text.spilled.is_none());
        text.write_str("c").unwrap();
        assert_eq!(text.as_bytes().len(), INLINE + 1);
        assert!(text.as_bytes().ends_with(b"abc"));
    }

    #[test]
    fn pushed_integers_read_as_formatted_ones() {
        let mut text = Text::new();
        let mut expected = String::new();
        for n in [0, 7, 10, 999, 1_000_000_007, u64::MAX] {
            text.push(";r=");
            text.push_int(n);
            write!(expected, ";r={n}").unwrap();
        }
        assert_eq!(text.as_bytes(), expected.as_bytes());
    }

    #[test]
    fn bytes_a_header_may_not_hold_give_no_value() {
        let mut text = Text::new();
        text.write_str("line\nbreak").unwrap();
        assert!(text.to_header_value().is_none());
    }
}
