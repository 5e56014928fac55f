//! The one wall clock of nodecare: Unix milliseconds, the unit of every time at the wire.

/// The current Unix time in milliseconds (0 if the clock is before 1970, saturating far in the
/// future).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn is_after_2020_and_monotone_enough() {
        let first = super::now_ms();
        assert!(first > 1_577_836_800_000, "{first}");
        assert!(super::now_ms() >= first);
    }
}
