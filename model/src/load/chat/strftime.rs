//! `strftime` for chat templates' `strftime_now` (Llama 3.x writes `strftime_now("%d %b %Y")`):
//! the C / POSIX locale's directives over a UTC time, as Python's `datetime.strftime` prints
//! them on Linux, including glibc's `%-d` (no padding). A directive outside this set is an error
//! naming it rather than a guess.

const MONTHS: [&str; 12] = [
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
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Year, month (1..=12) and day (1..=31) of the day `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// `format` applied to the UTC time `unix_seconds`.
pub fn strftime(unix_seconds: i64, format: &str) -> Result<String, String> {
    let days = unix_seconds.div_euclid(86_400);
    let secs = unix_seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (secs / 3600, secs / 60 % 60, secs % 60);
    // 1970-01-01 was a Thursday (index 3 from Monday).
    let weekday = (days + 3).rem_euclid(7) as usize;
    let before: u32 = (1..month)
        .map(|m| match m {
            2 if is_leap(year) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        })
        .sum();
    let yday = i64::from(before + day);
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut d = chars
            .next()
            .ok_or_else(|| format!("strftime_now: format {format:?} ends in a lone %"))?;
        let unpadded = d == '-';
        if unpadded {
            d = chars
                .next()
                .ok_or_else(|| format!("strftime_now: format {format:?} ends in %-"))?;
        }
        let num = |n: i64, width: usize| {
            if unpadded {
                n.to_string()
            } else {
                format!("{n:0width$}")
            }
        };
        match d {
            'Y' => out.push_str(&year.to_string()),
            'y' => out.push_str(&num(year.rem_euclid(100), 2)),
            'm' => out.push_str(&num(i64::from(month), 2)),
            'd' => out.push_str(&num(i64::from(day), 2)),
            'e' if unpadded => out.push_str(&day.to_string()),
            'e' => out.push_str(&format!("{day:>2}")),
            'j' => out.push_str(&num(yday, 3)),
            'H' => out.push_str(&num(hour, 2)),
            'I' => out.push_str(&num(hour12, 2)),
            'M' => out.push_str(&num(minute, 2)),
            'S' => out.push_str(&num(second, 2)),
            'p' => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            'B' => out.push_str(MONTHS[month as usize - 1]),
            'b' | 'h' => out.push_str(&MONTHS[month as usize - 1][..3]),
            'A' => out.push_str(DAYS[weekday]),
            'a' => out.push_str(&DAYS[weekday][..3]),
            '%' => out.push('%'),
            other => {
                return Err(format!(
                    "unsupported: strftime_now directive %{other} in {format:?} (supported: \
                     %Y %y %m %d %e %j %H %I %M %S %p %B %b %h %A %a %%, with - for no padding)"
                ))
            }
        }
    }
    Ok(out)
}
