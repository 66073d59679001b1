"""Input executors: perform actions on the OS. pyautogui is imported lazily (it fails without a display)."""
