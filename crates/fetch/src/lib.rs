//! Fetching on a tenant's word. A URL a tenant gives — its identity provider's key set, its
//! website's pages, and every page and redirect they lead to — is fetched by the [`Fetcher`],
//! which connects only to addresses it resolved and checked itself ([`client`]); a website is
//! walked by a [`Crawl`] that keeps to its scope and caps and obeys its `robots.txt`.
#![warn(missing_docs)]

pub mod client;
pub mod crawl;
pub mod links;
pub mod robots;
pub mod sitemap;

pub use client::{
    Answer, FETCHES_PER_MINUTE, FetchError, Fetched, Fetcher, Lookup, MAX_REDIRECTS, Refused,
    Validator, system,
};
pub use crawl::{Crawl, Found, Site, Visit};
