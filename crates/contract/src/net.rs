//! URLs a tenant gives (its identity provider's `jwks_url`, its website sources): what such a URL may be, and which
//! addresses Sluice may connect to on a tenant's word.
//!
//! The rules hold for the URL as a URL parser reads it, never for its text: `http://127.0.0.1@10.0.0.1/`
//! is a URL of host 10.0.0.1 with credentials, `http://127.0.0.1.example.com/` one of a name.
//! A name is checked after it is resolved, each address it resolves to, and the connection
//! goes to an address that was checked (`sluice-fetch` does that).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The longest URL a tenant may give.
pub const MAX_URL_BYTES: usize = 2_048;

/// A tenant's URL, parsed: `https` (`http` only to a loopback address or `localhost`, for
/// tests and local identity providers, fetched only where the operator allows it), a host, no
/// credentials, no fragment, at most [`MAX_URL_BYTES`]. The message says what is wrong with
/// it, for the tenant.
pub fn tenant_url(text: &str) -> Result<url::Url, String> {
    checked_url(text, |url| {
        let loopback = match url.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip
                .to_ipv4_mapped()
                .map_or(ip.is_loopback(), |v4| v4.is_loopback()),
            Some(url::Host::Domain(name)) => name == "localhost",
            None => false,
        };
        match url.scheme() == "https" || url.scheme() == "http" && loopback {
            true => Ok(()),
            false => Err("must be an https URL (http only to a loopback address)".into()),
        }
    })
}

/// A page of a tenant's website as a URL, parsed: [`tenant_url`]'s rules, except that `http`
/// is allowed anywhere (a site's pages are public text, not keys), and a fragment is dropped
/// (it names a place in the page, not another page).
pub fn site_url(text: &str) -> Result<url::Url, String> {
    // The URL parser ends a URL at its first `#` too.
    let page = text.split_once('#').map_or(text, |(page, _)| page);
    checked_url(page, |url| match url.scheme() {
        "https" | "http" => Ok(()),
        other => Err(format!("must be an http or https URL, not {other}:")),
    })
}

/// What [`tenant_url`] and [`site_url`] share: the length, the URL parsed, no credentials,
/// the `scheme` rule, no fragment, a host.
fn checked_url(
    text: &str,
    scheme: impl Fn(&url::Url) -> Result<(), String>,
) -> Result<url::Url, String> {
    if text.len() > MAX_URL_BYTES {
        return Err(format!("is over {MAX_URL_BYTES} bytes"));
    }
    let url = url::Url::parse(text).map_err(|e| format!("is not a URL ({e})"))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry a user name or password (user@host)".into());
    }
    scheme(&url)?;
    if url.fragment().is_some() {
        return Err("must not have a fragment (#…)".into());
    }
    if url.host().is_none() {
        return Err("has no host".into());
    }
    Ok(url)
}

/// Why Sluice does not connect to `ip` on a tenant's word, or `None` for a public address:
/// loopback, private, shared (carrier-grade NAT), link-local (the cloud metadata service,
/// 169.254.169.254, among them), unspecified, multicast, broadcast, documentation and
/// benchmarking ranges, reserved ones, and IPv6's equivalents — an IPv6 address that carries
/// an IPv4 one (mapped, compatible, NAT64, 6to4) is judged by the IPv4 address it carries.
pub fn not_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => not_public_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => not_public_v4(v4),
            None => not_public_v6(v6),
        },
    }
}

fn not_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        _ if ip.is_unspecified() || a == 0 => "an unspecified (this-network) address",
        (127, _, _) => "a loopback address",
        (10, _, _) | (172, 16..=31, _) | (192, 168, _) => "a private address",
        (100, 64..=127, _) => "a shared (carrier-grade NAT) address",
        (169, 254, _) => "a link-local address (the cloud metadata service is one)",
        (192, 0, 0) => "a protocol-assignment address",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "a documentation address",
        (198, 18..=19, _) => "a benchmarking address",
        (224..=239, _, _) => "a multicast address",
        (240..=255, _, _) => "a reserved or broadcast address",
        _ => return None,
    })
}

fn not_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    Some(match s[0] {
        _ if ip.is_unspecified() => "an unspecified address",
        _ if ip.is_loopback() => "a loopback address",
        0xfe80..=0xfebf => "a link-local address",
        0xfec0..=0xfeff => "a site-local address",
        0xfc00..=0xfdff => "a private (unique local) address (the cloud metadata service is one)",
        0xff00..=0xffff => "a multicast address",
        0x2001 if s[1] == 0x0db8 => "a documentation address",
        0x2001 if s[1] < 0x0200 => "a protocol-assignment address",
        0x0100 if s[1..4] == [0, 0, 0] => "a discard-only address",
        // Anything outside global unicast (2000::/3) is not a public address.
        x if !(0x2000..=0x3fff).contains(&x) => "a reserved address",
        _ => return None,
    })
}

/// The IPv4 address an IPv6 one carries: mapped (`::ffff:a.b.c.d`), compatible (`::a.b.c.d`),
/// NAT64 (`64:ff9b::a.b.c.d`, `64:ff9b:1::/48`), 6to4 (`2002:AABB:CCDD::`) or Teredo's server.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] => Some(v4(hi, lo)),
        [0, 0, 0, 0, 0, 0, hi, lo] if (hi, lo) > (0, 1) => Some(v4(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(v4(hi, lo)),
        [0x64, 0xff9b, 1, ..] => Some(v4(s[6], s[7])),
        [0x2002, hi, lo, ..] => Some(v4(hi, lo)),
        [0x2001, 0, hi, lo, ..] => Some(v4(hi, lo)),
        _ => None,
    }
}

/// A range of addresses in CIDR form (`127.0.0.0/8`, `::1/128`, or one address), which an
/// operator may allow (`SLUICE_FETCH_ALLOW`: tests fetch from 127.0.0.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    network: IpAddr,
    prefix: u8,
}

impl IpRange {
    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address as its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.network, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }

    /// A comma-separated list of ranges (empty: none).
    pub fn list(text: &str) -> Result<Vec<IpRange>, String> {
        (text.split(',').map(str::trim).filter(|r| !r.is_empty()))
            .map(str::parse)
            .collect()
    }
}

impl FromStr for IpRange {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (address, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let network: IpAddr = (address.trim().parse())
            .map_err(|_| format!("{text:?} is not an address or a CIDR range"))?;
        let most = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => most,
            Some(p) => (p.trim().parse::<u8>().ok())
                .filter(|p| *p <= most)
                .ok_or_else(|| format!("{text:?}: the prefix must be 0 to {most}"))?,
        };
        Ok(IpRange { network, prefix })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_judged_as_parsed_not_as_text() {
        for (url, why) in [
            ("http://127.0.0.1@127.0.0.1:19503/keys", "user name"),
            ("http://localhost@10.0.0.1/keys", "user name"),
            ("https://user:pw@idp.example.com/keys", "user name"),
            ("ftp://idp.example.com/keys", "https"),
            ("file:///etc/passwd", "https"),
            ("https://idp.example.com/keys#x", "fragment"),
            ("not a url", "not a URL"),
        ] {
            let e = tenant_url(url).unwrap_err();
            assert!(e.contains(why), "{url}: {e}");
        }
        let long = format!("https://idp.example.com/{}", "k".repeat(MAX_URL_BYTES));
        assert!(tenant_url(&long).is_err());
        // A name that starts like an address is a name (so not plain http); resolved, then
        // checked, when fetched.
        let e = tenant_url("http://127.0.0.1.example.com/keys").unwrap_err();
        assert!(e.contains("https"), "{e}");
        let url = tenant_url("https://127.0.0.1.example.com/keys").unwrap();
        assert_eq!(url.host_str(), Some("127.0.0.1.example.com"));
        // Other spellings of an address are the address.
        let url = tenant_url("http://2130706433/keys").unwrap();
        assert_eq!(url.host(), Some(url::Host::Ipv4(Ipv4Addr::LOCALHOST)));
        assert!(tenant_url("http://[::1]:8080/keys").is_ok());
        assert!(tenant_url("http://10.0.0.1/keys").is_err());
    }

    #[test]
    fn a_site_may_be_plain_http_and_its_fragment_is_no_other_page() {
        let url = site_url("http://docs.example.com/guide#install").unwrap();
        assert_eq!(url.as_str(), "http://docs.example.com/guide");
        for (url, why) in [
            ("ftp://docs.example.com/", "http or https"),
            ("file:///etc/passwd", "http or https"),
            ("javascript:alert(1)", "http or https"),
            ("http://user:pw@docs.example.com/", "user name"),
            ("http://", "not a URL"),
        ] {
            let e = site_url(url).unwrap_err();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn every_kind_of_inside_address_is_not_public() {
        for ip in [
            "127.0.0.1",
            "127.255.0.9",
            "10.0.0.1",
            "172.16.5.4",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.2.1",
            "198.18.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00:ec2::254",
            "fc00::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::10.0.0.1",
            "2002:7f00:1::",
            "2001:db8::1",
        ] {
            let parsed: IpAddr = ip.parse().unwrap();
            assert!(not_public(parsed).is_some(), "{ip} taken for public");
        }
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "2002:0808:0808::",
        ] {
            let parsed: IpAddr = ip.parse().unwrap();
            assert_eq!(not_public(parsed), None, "{ip}");
        }
    }

    #[test]
    fn ranges_an_operator_allows() {
        let ranges = IpRange::list("127.0.0.0/8, ::1,10.1.0.0/16").unwrap();
        let has = |ip: &str| ranges.iter().any(|r| r.contains(ip.parse().unwrap()));
        assert!(has("127.0.0.1") && has("127.9.9.9") && has("::1") && has("10.1.200.3"));
        assert!(has("::ffff:127.0.0.1"));
        assert!(!has("10.2.0.1") && !has("::2") && !has("8.8.8.8"));
        assert_eq!(IpRange::list("").unwrap(), []);
        assert!(IpRange::list("10.0.0.0/33").is_err());
        assert!(IpRange::list("localhost").is_err());
        let all: IpRange = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
    }
}
