//! The remote stores, Qdrant REST and Pinecone serverless: the store contract every backend
//! keeps, run against servers on 127.0.0.1 that keep what they are sent (Qdrant's engine
//! behind its REST API; Pinecone index hosts in memory); their requests checked against the
//! official API documents; their transport against stand-ins with canned answers. One test
//! binary (they link the JSON Schema validator and the servers; one binary links them once).

mod common;
mod pinecone;
mod pinecone_server;
mod qdrant;
mod qdrant_server;
