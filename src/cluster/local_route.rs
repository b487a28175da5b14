//! The interface this process's own network namespace reaches an address through: what the
//! doctor's network probe learns inside a host-network container, read directly where argus
//! itself runs on the host (a Slurm node step). The longest prefix of the main routing
//! table (`/proc/net/route`) that holds the address names it, as the probe's fallback does;
//! policy routing is not read.

use std::net::Ipv4Addr;

/// `RTF_REJECT` in a route's flags.
const RTF_REJECT: u32 = 0x0200;

/// The most of `/proc/net/route` read (a table of thousands of routes fits).
const ROUTE_CAP: u64 = 1 << 20;

/// The interface the route to `dest` leaves through (`lo` for a loopback address).
pub fn iface_to(dest: Ipv4Addr) -> std::io::Result<String> {
    if dest.is_loopback() {
        return Ok("lo".into());
    }
    let mut table = String::new();
    std::io::Read::read_to_string(
        &mut std::io::Read::take(std::fs::File::open("/proc/net/route")?, ROUTE_CAP),
        &mut table,
    )?;
    longest_match(&table, dest)
        .ok_or_else(|| std::io::Error::other(format!("no route to {dest} in /proc/net/route")))
}

/// The interface of the longest prefix holding `dest` in a `/proc/net/route` table.
fn longest_match(table: &str, dest: Ipv4Addr) -> Option<String> {
    let target = u32::from(dest);
    // Each is printed as the host's reading of the address's bytes in memory (network
    // order): its native-endian bytes are the address.
    let hex = |text: &str| {
        u32::from_str_radix(text, 16)
            .ok()
            .map(|v| u32::from(Ipv4Addr::from(v.to_ne_bytes())))
    };
    // A line cut by the read's cap (no newline after it) is not read.
    let whole = match table.rfind('\n') {
        Some(end) => &table[..end],
        None => "",
    };
    let mut best: Option<(u32, &str)> = None;
    for line in whole.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let [iface, net, _, flags, _, _, _, mask, ..] = cols.as_slice() else {
            continue;
        };
        // A reject route (unreachable, blackhole; its interface `*`) sends nothing.
        let reject = u32::from_str_radix(flags, 16).map_or(true, |f| f & RTF_REJECT != 0);
        if reject || *iface == "*" {
            continue;
        }
        let (Some(net), Some(mask)) = (hex(net), hex(mask)) else {
            continue;
        };
        if target & mask == net && best.is_none_or(|(m, _)| mask.count_ones() > m.count_ones()) {
            best = Some((mask, iface));
        }
    }
    best.map(|(_, iface)| iface.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str =
        "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0102000A\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t0002000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
veth-b\t0064A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
*\t0065A8C0\t00000000\t0201\t0\t0\t0\t00FFFFFF\t0\t0\t0
";

    #[test]
    fn the_longest_prefix_names_the_interface() {
        let at = |a, b, c, d| longest_match(TABLE, Ipv4Addr::new(a, b, c, d));
        assert_eq!(at(192, 168, 100, 7).as_deref(), Some("veth-b"));
        assert_eq!(at(10, 0, 2, 9).as_deref(), Some("eth0"));
        assert_eq!(at(8, 8, 8, 8).as_deref(), Some("eth0"));
        // The reject route is passed over: the default route is the match.
        assert_eq!(at(192, 168, 101, 3).as_deref(), Some("eth0"));
        // A last line without its newline (cut by the cap) is not read.
        let cut = &TABLE[..TABLE.len() - 1];
        assert_eq!(
            longest_match(cut, Ipv4Addr::new(192, 168, 101, 3)).as_deref(),
            Some("eth0")
        );
        assert_eq!(
            longest_match(
                "Iface\nveth-b\t0064A8C0\t0\t0001\t0\t0\t0\tFFFFFF",
                Ipv4Addr::new(192, 168, 100, 7)
            ),
            None
        );
        assert_eq!(longest_match("Iface\n", Ipv4Addr::new(1, 2, 3, 4)), None);
        assert_eq!(iface_to(Ipv4Addr::LOCALHOST).unwrap(), "lo");
    }
}
