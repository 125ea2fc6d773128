"""Data report: how many gold answers of each dataset ``math_reward`` can grade."""
