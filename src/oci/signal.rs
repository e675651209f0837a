//! The signal StopContainer sends first: the request's `stop_signal`, else the image's
//! `StopSignal`, else SIGTERM. Names are accepted with or without `SIG`, in any case, as are
//! numbers and the real-time signals `RTMIN+n` / `RTMAX-n` (Docker's notation).

use super::SpecError;

const SIGTERM: i32 = 15;
/// glibc reserves the first two real-time signals, so programs see SIGRTMIN as 34.
const SIGRTMIN: i32 = 34;
const SIGRTMAX: i32 = 64;

const NAMES: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("IOT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("STKFLT", 16),
    ("CHLD", 17),
    ("CLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("POLL", 29),
    ("PWR", 30),
    ("SYS", 31),
];

/// The signal number StopContainer starts with. `request` is the request's `stop_signal`
/// and `image` the image's `StopSignal`; either may be empty.
pub fn stop_signal(request: &str, image: &str) -> Result<i32, SpecError> {
    let (field, value) = if !request.trim().is_empty() {
        ("stop_signal", request)
    } else if !image.trim().is_empty() {
        ("the image's StopSignal", image)
    } else {
        return Ok(SIGTERM);
    };
    parse_signal(value)
        .ok_or_else(|| SpecError::Invalid(format!("{field}: unknown signal {value:?}")))
}

/// A signal by name (`SIGQUIT`, `quit`), number (`3`) or real-time offset (`SIGRTMIN+2`).
pub fn parse_signal(text: &str) -> Option<i32> {
    let upper = text.trim().to_ascii_uppercase();
    if let Ok(number) = upper.parse::<i32>() {
        return (1..=SIGRTMAX).contains(&number).then_some(number);
    }
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some(rest) = name.strip_prefix("RTMIN") {
        return realtime(SIGRTMIN, rest, '+');
    }
    if let Some(rest) = name.strip_prefix("RTMAX") {
        return realtime(SIGRTMAX, rest, '-');
    }
    NAMES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, number)| *number)
}

/// `base`, or `base` moved by `+n` / `-n` (only in the direction that stays in range).
fn realtime(base: i32, offset: &str, direction: char) -> Option<i32> {
    if offset.is_empty() {
        return Some(base);
    }
    let n: i32 = offset.strip_prefix(direction)?.parse().ok()?;
    let number = if direction == '+' { base + n } else { base - n };
    (SIGRTMIN..=SIGRTMAX).contains(&number).then_some(number)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_and_parses_the_stop_signal() {
        let table = [
            ("", "", Ok(15)),
            ("SIGQUIT", "", Ok(3)),
            ("", "SIGQUIT", Ok(3)),
            ("", "QUIT", Ok(3)),
            ("", "quit", Ok(3)),
            ("", "3", Ok(3)),
            ("SIGINT", "SIGQUIT", Ok(2)),
            ("  ", "SIGUSR1", Ok(10)),
            ("SIGRTMIN", "", Ok(34)),
            ("SIGRTMIN+3", "", Ok(37)),
            ("RTMAX-2", "", Ok(62)),
            ("SIGKILL", "", Ok(9)),
            ("SIGWINCH", "", Ok(28)),
            ("SIGFOO", "", Err("stop_signal: unknown signal \"SIGFOO\"")),
            (
                "",
                "65",
                Err("the image's StopSignal: unknown signal \"65\""),
            ),
            ("", "0", Err("the image's StopSignal: unknown signal \"0\"")),
            (
                "RTMIN+31",
                "",
                Err("stop_signal: unknown signal \"RTMIN+31\""),
            ),
            (
                "RTMIN-1",
                "",
                Err("stop_signal: unknown signal \"RTMIN-1\""),
            ),
        ];
        for (request, image, want) in table {
            let got = stop_signal(request, image).map_err(|e| e.to_string());
            assert_eq!(got, want.map_err(String::from), "{request:?} / {image:?}");
        }
    }
}
