//! Wall-clock times as crust writes them: nanoseconds since the epoch in records, RFC 3339 in UTC
//! where a person or kubelet reads them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in nanoseconds since the epoch (what records keep).
pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}

/// `2016-10-06T00:17:09.669794202Z`: UTC with nine fractional digits, as RFC 3339 allows and
/// kubelet's parser (Go's time.RFC3339Nano) reads.
pub fn rfc3339_nanos(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    format!("{}.{:09}Z", seconds(d.as_secs()), d.subsec_nanos())
}

/// `2016-10-06T00:17:09.669Z` of a record's nanoseconds since the epoch (0: never).
pub fn rfc3339_millis(nanos: i64) -> String {
    let d = Duration::from_nanos(nanos.max(0) as u64);
    format!("{}.{:03}Z", seconds(d.as_secs()), d.subsec_millis())
}

fn seconds(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millisecond_times_of_records() {
        assert_eq!(
            rfc3339_millis(1_475_713_029_669_794_202),
            "2016-10-06T00:17:09.669Z"
        );
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
    }
}
