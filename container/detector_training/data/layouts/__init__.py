"""Readers of labelled data as each tool or system exports it; each returns LabelledSets."""
