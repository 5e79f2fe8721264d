"""EAGLE: a feature-level draft head, draft trees and their lossless verification."""
