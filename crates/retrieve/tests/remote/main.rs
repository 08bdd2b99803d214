//! The remote stores, Qdrant REST and Pinecone serverless: their requests checked against the
//! official API documents and their transport against stand-ins on 127.0.0.1. One test binary
//! (both link the JSON Schema validator and the stand-in server; one binary links them once).

mod common;
mod pinecone;
mod qdrant;
