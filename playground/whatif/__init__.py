"""Questions asked of runs: branches, sample many, score (no gradio, no plotly)."""
