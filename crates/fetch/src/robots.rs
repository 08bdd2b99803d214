//! A site's `robots.txt` as RFC 9309 reads it: the groups for Sluice's product token
//! ([`AGENT`]), else those for `*`; within them the longest matching rule decides (`allow`
//! on a tie), with `*` matching any run of characters and a final `$` the end of the path.
//! `Crawl-delay` (not in the RFC, widely sent) is read from the same groups.

use std::time::Duration;

/// The product token Sluice's crawler answers to in `robots.txt`, and sends in `User-Agent`.
pub const AGENT: &str = "sluice";

/// The most of a `robots.txt` read (the RFC asks crawlers to read at least 500 KiB).
pub const MAX_ROBOTS_BYTES: usize = 512 << 10;

/// The rules at most kept (each one of a site's lines), so a page's check stays bounded.
const MAX_RULES: usize = 4_096;

/// What a site's `robots.txt` says to Sluice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Robots {
    /// `(allow, pattern)`, as written.
    rules: Vec<(bool, String)>,
    /// The `Crawl-delay` of the groups that apply.
    pub crawl_delay: Option<Duration>,
}

impl Robots {
    /// Every page allowed: a site without a `robots.txt` (404, 410 and other 4xx).
    pub fn allow_all() -> Self {
        Self::default()
    }

    /// Every page disallowed: a site whose `robots.txt` could not be read (a 5xx, no
    /// connection), which the RFC asks a crawler to read as "disallow all".
    pub fn disallow_all() -> Self {
        Self {
            rules: vec![(false, "/".into())],
            crawl_delay: None,
        }
    }

    /// The rules of `text` for [`AGENT`].
    pub fn parse(text: &str) -> Self {
        // Each group: its user agents, its rules, its delay.
        struct Group {
            agents: Vec<String>,
            rules: Vec<(bool, String)>,
            delay: Option<Duration>,
        }
        let mut groups: Vec<Group> = Vec::new();
        // Whether the last line was a user-agent line (consecutive ones share a group).
        let mut in_agents = false;
        for line in text.lines().take(MAX_RULES * 4) {
            let line = line.split('#').next().unwrap_or_default().trim();
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let (key, value) = (key.trim().to_ascii_lowercase(), value.trim());
            match key.as_str() {
                "user-agent" => {
                    if !in_agents || groups.is_empty() {
                        groups.push(Group {
                            agents: Vec::new(),
                            rules: Vec::new(),
                            delay: None,
                        });
                    }
                    let agent = value.split('/').next().unwrap_or_default();
                    if let Some(group) = groups.last_mut() {
                        group.agents.push(agent.trim().to_ascii_lowercase());
                    }
                    in_agents = true;
                }
                "allow" | "disallow" => {
                    in_agents = false;
                    if let Some(group) = groups.last_mut()
                        && !value.is_empty()
                    {
                        group.rules.push((key == "allow", value.to_string()));
                    }
                }
                "crawl-delay" => {
                    in_agents = false;
                    if let Some(group) = groups.last_mut() {
                        group.delay = (value.parse::<f64>().ok())
                            .filter(|s| s.is_finite() && *s >= 0.0)
                            .map(|s| Duration::from_secs_f64(s.min(3_600.0)));
                    }
                }
                _ => {}
            }
        }
        let ours = |agent: &str| groups.iter().any(|g| g.agents.iter().any(|a| a == agent));
        let wanted = if ours(AGENT) { AGENT } else { "*" };
        let mut robots = Robots::default();
        for group in groups
            .iter()
            .filter(|g| g.agents.iter().any(|a| a == wanted))
        {
            robots.rules.extend(group.rules.iter().cloned());
            robots.crawl_delay = robots.crawl_delay.max(group.delay);
        }
        robots.rules.truncate(MAX_RULES);
        robots
    }

    /// Whether Sluice may fetch `path` (the URL's path and query, as sent).
    pub fn allows(&self, path: &str) -> bool {
        // The longest matching pattern decides; `allow` wins a tie. `/robots.txt` is always
        // allowed.
        if path == "/robots.txt" {
            return true;
        }
        let mut best: Option<(usize, bool)> = None;
        for (allow, pattern) in &self.rules {
            if matches(pattern, path) {
                let length = pattern.len();
                best = match best {
                    Some((l, a)) if l > length || (l == length && a) => Some((l, a)),
                    _ => Some((length, *allow)),
                };
            }
        }
        best.is_none_or(|(_, allow)| allow)
    }
}

/// Whether `path` starts with what `pattern` matches (`*` any run, a final `$` the end). The
/// classic wildcard walk: on a mismatch, the last `*` takes one more character; linear in
/// practice, at worst the product of the two lengths (both bounded).
fn matches(pattern: &str, path: &str) -> bool {
    let (pattern, anchored) = match pattern.strip_suffix('$') {
        Some(p) => (p.as_bytes(), true),
        None => (pattern.as_bytes(), false),
    };
    let path = path.as_bytes();
    let (mut p, mut s) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if p == pattern.len() && (!anchored || s == path.len()) {
            return true;
        }
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, s));
            p += 1;
            continue;
        }
        if p < pattern.len() && s < path.len() && pattern[p] == path[s] {
            p += 1;
            s += 1;
            continue;
        }
        match star {
            Some((sp, ss)) if ss < path.len() => {
                star = Some((sp, ss + 1));
                p = sp + 1;
                s = ss + 1;
            }
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_matching_rule_decides_and_allow_wins_a_tie() {
        let robots = Robots::parse(
            "User-agent: *\nDisallow: /private/\nAllow: /private/open\nDisallow: /*.pdf$\n\
             Disallow: /tie\nAllow: /tie\n",
        );
        assert!(robots.allows("/guide"));
        assert!(!robots.allows("/private/keys"));
        assert!(robots.allows("/private/open/page"));
        assert!(!robots.allows("/files/a.pdf"));
        assert!(robots.allows("/files/a.pdf?x=1"), "$ anchors the end");
        assert!(robots.allows("/tie"));
        assert!(robots.allows("/robots.txt"));
    }

    #[test]
    fn sluices_own_group_wins_over_the_star_group_and_groups_share_agents() {
        let text = "User-agent: *\nDisallow: /\n\nUser-agent: other\nUser-Agent: Sluice/1.0\n\
                    Disallow: /drafts\nCrawl-delay: 2.5\n";
        let robots = Robots::parse(text);
        assert!(robots.allows("/guide"));
        assert!(!robots.allows("/drafts/x"));
        assert_eq!(robots.crawl_delay, Some(Duration::from_millis(2500)));
        let star = Robots::parse("User-agent: *\nDisallow: /\n");
        assert!(!star.allows("/guide"));
        assert_eq!(Robots::parse("Disallow: /x\n"), Robots::allow_all());
        assert!(!Robots::disallow_all().allows("/a"));
    }

    #[test]
    fn wildcards_match_any_run() {
        assert!(matches("/a*c", "/abbbc/d"));
        assert!(matches("/*/edit", "/x/y/edit"));
        assert!(!matches("/a*c$", "/abcd"));
        assert!(matches("*", "/anything"));
        assert!(!matches("/b", "/a"));
        // A path of stars against a long near-miss ends (bounded work).
        let pattern = "/".to_string() + &"*a".repeat(50) + "b$";
        let path = "/".to_string() + &"a".repeat(2_000);
        assert!(!matches(&pattern, &path));
    }
}
