//! The page's tree, built by html5ever's tree builder into dom_query's document with its
//! nesting bounded while it is built.
//!
//! The tree builder walks its stack of open elements (the ancestors of where it inserts) on
//! most tags, so a page that nests deep costs it time quadratic in the depth: `<ul><li>`
//! repeated 60,000 times took 46 s of CPU. Which tags nest is the tree builder's own call (it
//! repairs lists, tables, formatting elements, implicitly closed tags), so no model of it in a
//! tokenizer can count what it builds; the depth is counted here, at every element the builder
//! inserts, on the tree it builds. The page is fed in small chunks; between two chunks the
//! depth and the request are checked, so the work past the cap (or past the time budget, or
//! after the client left) is at most one chunk's.

use std::borrow::Cow;
use std::cell::Cell;

use dom_query::{Document, NodeId};
use html5ever::interface::{ElementFlags, NodeOrText, QuirksMode, TreeSink};
use html5ever::tendril::{StrTendril, TendrilSink};
use html5ever::tokenizer::TokenizerOpts;
use html5ever::tree_builder::TreeBuilderOpts;
use html5ever::{Attribute, ParseOpts, QualName};

use sluice_contract::cancel::Cancel;

use crate::{ConvertError, ConvertLimits, TextBudget, stopped};

/// Input fed to the tree builder between two checks of the depth and of the request: at most
/// about 1,400 tags, so at most that many levels past the cap before it is seen.
pub(super) const PARSE_CHUNK: usize = 4 << 10;

/// Parses `html` into a document, refusing it once an element is inserted deeper than
/// `SLUICE_MAX_HTML_DEPTH` or its text passes `text_left` bytes, and stopping when `cancel`
/// says so.
pub(super) fn parse(
    html: &str,
    limits: &ConvertLimits,
    text_left: usize,
    cancel: &Cancel,
) -> Result<Document, ConvertError> {
    let sink = Bounded {
        document: Document::default(),
        cap: limits.max_html_depth,
        deepest: Cell::new(0),
        text: Cell::new(0),
    };
    let opts = ParseOpts {
        tokenizer: TokenizerOpts::default(),
        // As dom_query parses: `<noscript>`'s content is markup.
        tree_builder: TreeBuilderOpts {
            scripting_enabled: false,
            ..Default::default()
        },
    };
    let mut parser = html5ever::parse_document(sink, opts);
    let mut rest = html;
    while !rest.is_empty() {
        let mut at = rest.len().min(PARSE_CHUNK);
        while !rest.is_char_boundary(at) {
            at += 1;
        }
        let (chunk, after) = rest.split_at(at);
        rest = after;
        parser.process(StrTendril::from_slice(chunk));
        let sink = &parser.tokenizer.sink.sink;
        if sink.deepest.get() > limits.max_html_depth {
            return Err(super::too_deep(sink.deepest.get(), limits));
        }
        // Scripts' and styles' text too, which is removed later: a bound, not the count.
        if sink.text.get() > text_left {
            return Err(TextBudget::new(text_left).exceeded());
        }
        cancel.check().map_err(|s| stopped(s, limits))?;
    }
    Ok(parser.finish())
}

/// dom_query's document as the tree builder's sink, with the depth of the deepest element
/// inserted so far (counted up to one past the cap: a walk up the tree of bounded length) and
/// the bytes of text inserted.
struct Bounded {
    document: Document,
    cap: usize,
    deepest: Cell<usize>,
    text: Cell<usize>,
}

impl Bounded {
    /// Notes the depth a node inserted under `parent` has, when it is an element, or its
    /// length, when it is text.
    fn inserted(&self, parent: &NodeId, child: &NodeOrText<NodeId>) {
        let child = match child {
            NodeOrText::AppendText(text) => {
                self.text.set(self.text.get() + text.len());
                return;
            }
            NodeOrText::AppendNode(child) => child,
        };
        if !self
            .document
            .tree
            .get(child)
            .is_some_and(|n| n.is_element())
        {
            return;
        }
        let ancestors = (self.document.tree)
            .ancestor_ids_of_it(parent, Some(self.cap + 1))
            .count();
        // The parent, its ancestors, then the child itself.
        let depth = ancestors + 1;
        self.deepest.set(self.deepest.get().max(depth));
    }
}

impl TreeSink for Bounded {
    type Handle = NodeId;
    type Output = Document;
    type ElemName<'a> = <Document as TreeSink>::ElemName<'a>;

    fn finish(self) -> Document {
        self.document
    }

    fn parse_error(&self, msg: Cow<'static, str>) {
        TreeSink::parse_error(&self.document, msg);
    }

    fn get_document(&self) -> NodeId {
        TreeSink::get_document(&self.document)
    }

    fn elem_name<'a>(&'a self, target: &'a NodeId) -> Self::ElemName<'a> {
        TreeSink::elem_name(&self.document, target)
    }

    fn create_element(&self, name: QualName, attrs: Vec<Attribute>, flags: ElementFlags) -> NodeId {
        TreeSink::create_element(&self.document, name, attrs, flags)
    }

    fn create_comment(&self, text: StrTendril) -> NodeId {
        TreeSink::create_comment(&self.document, text)
    }

    fn create_pi(&self, target: StrTendril, data: StrTendril) -> NodeId {
        TreeSink::create_pi(&self.document, target, data)
    }

    fn append(&self, parent: &NodeId, child: NodeOrText<NodeId>) {
        self.inserted(parent, &child);
        TreeSink::append(&self.document, parent, child);
    }

    fn append_based_on_parent_node(
        &self,
        element: &NodeId,
        prev_element: &NodeId,
        child: NodeOrText<NodeId>,
    ) {
        self.inserted(prev_element, &child);
        TreeSink::append_based_on_parent_node(&self.document, element, prev_element, child);
    }

    fn append_doctype_to_document(
        &self,
        name: StrTendril,
        public_id: StrTendril,
        system_id: StrTendril,
    ) {
        TreeSink::append_doctype_to_document(&self.document, name, public_id, system_id);
    }

    fn get_template_contents(&self, target: &NodeId) -> NodeId {
        TreeSink::get_template_contents(&self.document, target)
    }

    fn same_node(&self, x: &NodeId, y: &NodeId) -> bool {
        TreeSink::same_node(&self.document, x, y)
    }

    fn set_quirks_mode(&self, mode: QuirksMode) {
        TreeSink::set_quirks_mode(&self.document, mode);
    }

    fn append_before_sibling(&self, sibling: &NodeId, new_node: NodeOrText<NodeId>) {
        // A sibling's depth is its parent's child's.
        if let Some(parent) = self.document.tree.parent_of(sibling) {
            self.inserted(&parent.id, &new_node);
        }
        TreeSink::append_before_sibling(&self.document, sibling, new_node);
    }

    fn add_attrs_if_missing(&self, target: &NodeId, attrs: Vec<Attribute>) {
        TreeSink::add_attrs_if_missing(&self.document, target, attrs);
    }

    fn remove_from_parent(&self, target: &NodeId) {
        TreeSink::remove_from_parent(&self.document, target);
    }

    fn reparent_children(&self, node: &NodeId, new_parent: &NodeId) {
        TreeSink::reparent_children(&self.document, node, new_parent);
    }

    fn is_mathml_annotation_xml_integration_point(&self, handle: &NodeId) -> bool {
        TreeSink::is_mathml_annotation_xml_integration_point(&self.document, handle)
    }
}
