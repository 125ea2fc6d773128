"""Reward-pass cost: seconds per ``math_reward`` call of n completions."""
